"""Per-cast leases: which worker may make a cast now, read from the store alone.

A worker takes a cast by appending its `start` (conditionally, at the tail it read); the
`start` carries the worker's lease (`lease_ms`). The lease holds while the owner appends to the
cast (every record of the attempt renews it) or, when it has nothing to append (ahead of its
listener, or between chunks that take long), renews it in `leases/<cast id>`. Another worker
takes the cast over, with a new attempt, only once the lease has run out: `lease_ms` plus
`LEASE_SKEW_MS` after the last renewal, by the reader's clock. Record timestamps are their
writers' clocks, so hosts must agree within `LEASE_SKEW_MS`.

The owner fences itself by its own monotonic clock: it renews at a third of the lease, and
before rendering a chunk on a lease half gone it renews first (waiting on the store, so a
worker cut off from the store renders nothing more); a renewal the store gives up on ends the
worker. So two workers never make one cast at once, but for at most the one chunk in flight
when the owner lost the store; that stale owner's next append fails its condition and it
drops the cast.
"""

from __future__ import annotations

import msgspec

from speechd.casts import CastHead, Event, Lease, decode, lease_stream, worker_alive
from speechd.durable import SeqOutOfRange, Store

__all__ = ["LEASE_SKEW_MS", "lease_held"]

LEASE_SKEW_MS = 1000


async def _last_renewal(store: Store, cast_id: str) -> tuple[int, Lease] | None:
    stream = lease_stream(cast_id)
    tail = await store.check_tail(stream)
    if tail == 0:
        return None
    try:
        batch = await store.read(stream, tail - 1, max_records=1)
    except SeqOutOfRange:  # released just now
        return None
    if not batch.records:
        return None
    record = batch.records[0]
    try:
        return record.timestamp, decode(record.body, Lease)
    except msgspec.DecodeError:
        return None


async def lease_held(store: Store, cast_id: str, head: CastHead, *, now_ms: int) -> bool:
    """Whether the latest attempt's owner still holds its lease on the cast (never once the
    attempt ended: eos, error, or a retry asked after its error)."""
    latest = head.start
    if latest is None or head.event in (Event.EOS, Event.ERROR, Event.RETRY):
        return False
    if latest.lease_ms <= 0:  # a start from before leases: the owner's heartbeats decide
        return await worker_alive(store, latest.worker, now_ms=now_ms)
    renewed = head.touched_ms  # the cast's last record belongs to the latest attempt
    if now_ms < renewed + latest.lease_ms + LEASE_SKEW_MS:
        return True
    found = await _last_renewal(store, cast_id)
    if found is not None:
        at, lease = found
        if (lease.attempt, lease.worker) == (latest.attempt, latest.worker):
            renewed = max(renewed, at)
    return now_ms < renewed + latest.lease_ms + LEASE_SKEW_MS
