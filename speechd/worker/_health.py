"""Worker health through the store, so it works for remote workers as well as local ones.

Each worker owns `workers/<id>`: at start it clears it and appends `ready` (voices, device,
pid, heartbeat period) as seq 0, then a `heartbeat` every period and as each chunk starts, and
`stopped` on a clean exit. After `ROTATE_NOTICES` records it starts the stream over with
`ready` (a reader between the two sees no such worker for that instant). A worker is alive
while its last notice is ready/heartbeat and younger than `FRESH_HEARTBEATS` periods.
Torch-free: the api calls `ready_workers` for /readyz and the voices.
"""

from __future__ import annotations

import msgspec

from speechd.casts import WORKERS_PREFIX, WorkerNotice, decode, worker_stream
from speechd.durable import Record, SeqOutOfRange, Store

__all__ = ["FRESH_HEARTBEATS", "last_notice", "ready_workers", "worker_alive"]

FRESH_HEARTBEATS = 3
_LIVE = ("ready", "heartbeat")


def _fresh(record: Record, notice: WorkerNotice, now_ms: int) -> bool:
    age = now_ms - record.timestamp
    return notice.kind in _LIVE and age < FRESH_HEARTBEATS * max(notice.heartbeat_ms, 1)


async def _notice_at(store: Store, stream: str, seq: int) -> tuple[Record, WorkerNotice] | None:
    try:
        batch = await store.read(stream, seq, max_records=1)
    except SeqOutOfRange:  # the worker started its stream over just now
        return None
    if not batch.records:
        return None
    record = batch.records[0]
    try:
        return record, decode(record.body, WorkerNotice)
    except msgspec.DecodeError:
        return None


async def last_notice(store: Store, worker_id: str) -> tuple[Record, WorkerNotice] | None:
    """The last notice `worker_id` wrote (with its record), if any."""
    stream = worker_stream(worker_id)
    tail = await store.check_tail(stream)
    return await _notice_at(store, stream, tail - 1) if tail else None


async def worker_alive(store: Store, worker_id: str, *, now_ms: int) -> bool:
    """Whether `worker_id` announced itself ready or beat its heart lately."""
    found = await last_notice(store, worker_id)
    return found is not None and _fresh(*found, now_ms)


async def ready_workers(store: Store, *, now_ms: int) -> list[WorkerNotice]:
    """The workers that are ready now: their `ready` notice (voices, device, pid), with
    `time_ms` of their latest heartbeat. Stopped and silent workers are left out."""
    ready: list[WorkerNotice] = []
    for info in await store.list(WORKERS_PREFIX, limit=10_000):
        if info.next_seq == 0:
            continue
        last = await _notice_at(store, info.name, info.next_seq - 1)
        if last is None or not _fresh(*last, now_ms):
            continue
        first = last if info.next_seq == 1 else await _notice_at(store, info.name, 0)
        if first is None or first[1].kind != "ready":
            continue
        ready.append(msgspec.structs.replace(first[1], time_ms=last[1].time_ms))
    return ready
