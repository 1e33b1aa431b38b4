"""The jobs in `jobs` no worker has finished: those at or above the committed cursor.

A job below the committed cursor is finished for every reader (DESIGN.md §3); the jobs above it
are waiting, being made, or finished by a worker whose commit has not passed them yet (the
cursor moves only over a contiguous run). Reading them is one page per thousand jobs above the
cursor: callers do it for rare decisions (a cast that looks stuck, a cast past retention),
never per request.
"""

from __future__ import annotations

from typing import Final

import msgspec

from speechd.durable import SeqOutOfRange, Store

from ._records import Cursor, Job, decode
from ._streams import JOBS, JOBS_CURSOR

__all__ = ["waiting_jobs"]

_PAGE: Final = 1000


async def _committed(store: Store) -> int:
    tail = await store.check_tail(JOBS_CURSOR)
    if tail == 0:
        return 0
    try:
        last = await store.read(JOBS_CURSOR, tail - 1, max_records=1)
    except SeqOutOfRange:  # committed (and trimmed) again meanwhile: further back is safe
        return 0
    return decode(last.records[0].body, Cursor).offset if last.records else 0


async def waiting_jobs(store: Store) -> set[str]:
    """The casts of the jobs at or above the committed cursor (not finished by any worker)."""
    offset = await _committed(store)
    ids: set[str] = set()
    while True:
        try:
            batch = await store.read(JOBS, offset, max_records=_PAGE)
        except SeqOutOfRange as exc:
            if exc.seq_num < exc.first:  # trimmed below a newer commit: finished jobs
                offset = exc.first
                continue
            return ids
        for record in batch.records:
            try:
                ids.add(decode(record.body, Job).id)
            except msgspec.DecodeError:
                continue
        if not batch.records or batch.records[-1].seq_num + 1 >= batch.tail:
            return ids
        offset = batch.records[-1].seq_num + 1
