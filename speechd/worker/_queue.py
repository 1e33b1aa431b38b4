"""The line of casts waiting in `jobs`, read from the store (torch-free; the api uses it).

A cast waits while its stream holds only `meta` (no worker has started it). Workers admit
waiting casts in `jobs` order, so a cast's place in line is the number of distinct waiting
casts whose jobs come before its own, counted from the committed cursor.
"""

from __future__ import annotations

import msgspec

from speechd.casts import JOBS, JOBS_CURSOR, Cursor, Job, cast_stream, decode
from speechd.durable import Store

__all__ = ["committed_offset", "queue_depth", "queue_position"]

_PAGE = 1000


async def committed_offset(store: Store) -> int:
    """The committed read offset into `jobs` (every job below it is finished)."""
    tail = await store.check_tail(JOBS_CURSOR)
    if tail == 0:
        return 0
    batch = await store.read(JOBS_CURSOR, tail - 1, max_records=1)
    return decode(batch.records[0].body, Cursor).offset


async def queue_depth(store: Store) -> int:
    """Jobs not yet finished: those waiting in line plus those being synthesized."""
    return max(0, await store.check_tail(JOBS) - await committed_offset(store))


async def _waiting(store: Store, cast_id: str) -> bool:
    return await store.check_tail(cast_stream(cast_id)) == 1


async def queue_position(store: Store, cast_id: str) -> int | None:
    """How many waiting casts are ahead of `cast_id` (0: it starts next), or None when it is
    not waiting (started, finished, unknown, or its job is not in `jobs`)."""
    if not await _waiting(store, cast_id):
        return None
    offset = await committed_offset(store)
    seen: set[str] = set()
    ahead = 0
    while True:
        batch = await store.read(JOBS, offset, max_records=_PAGE)
        for record in batch.records:
            try:
                job_id = decode(record.body, Job).id
            except msgspec.DecodeError:
                continue
            if job_id == cast_id:
                return ahead
            if job_id not in seen:
                seen.add(job_id)
                if await _waiting(store, job_id):
                    ahead += 1
        if not batch.records or batch.records[-1].seq_num + 1 >= batch.tail:
            return None
        offset = batch.records[-1].seq_num + 1
