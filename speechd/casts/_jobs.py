"""The jobs in `jobs` no worker has finished: those at or above the committed cursor.

A job below the committed cursor is finished for every reader
(`docs/design/index.md#the-worker`); the jobs above it are waiting, being made, or finished by
a worker whose commit has not passed them yet (the cursor moves only over a contiguous run).
Reading them is one page per thousand jobs above the cursor: callers do it for rare decisions
(a cast that looks stuck, a cast past retention), never per request.
"""

from __future__ import annotations

from typing import Final

import msgspec

from speechd.durable import SeqOutOfRange, Store

from ._queue import committed_offset
from ._records import Job, decode
from ._streams import JOBS

__all__ = ["waiting_jobs"]

_PAGE: Final = 1000


async def waiting_jobs(store: Store) -> set[str]:
    """The casts of the jobs at or above the committed cursor (not finished by any worker)."""
    offset = await committed_offset(store)
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
