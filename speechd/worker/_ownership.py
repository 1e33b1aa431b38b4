"""Which casts are this worker's: per-cast leases, read from the store alone; the renewals of
the casts it makes; and the jobs it leaves to other live workers until their leases run out.

**The lease.** A worker takes a cast by appending its `start` (conditionally, at the tail it
read); the `start` carries the worker's lease (`lease_ms`). The lease holds while the owner
appends to the cast (every record of the attempt renews it) or, when it has nothing to append
(ahead of its listener, or between chunks that take long), renews it in `leases/<cast id>`.
Another worker takes the cast over, with a new attempt, only once the lease has run out:
`lease_ms` plus `LEASE_SKEW_MS` after the last renewal, by the reader's clock (`lease_held`).
Record timestamps are their writers' clocks, so hosts must agree within `LEASE_SKEW_MS`.

The owner fences itself by its own monotonic clock: it renews at a third of the lease, and
before rendering a chunk on a lease half gone it renews first (waiting on the store, so a
worker cut off from the store renders nothing more); a renewal the store gives up on ends the
worker. So two workers never make one cast at once, but for at most the one chunk in flight
when the owner lost the store; that stale owner's next append fails its condition and it
drops the cast. A finished cast's renewals are deleted.

A job whose cast another worker holds is *deferred*: looked at again every heartbeat (or half
lease): finished once its cast ended, taken back once the lease ran out.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable

import msgspec

from speechd.casts import CastHead, read_head, worker_alive
from speechd.casts.schema import (
    Event,
    Lease,
    cast_stream,
    decode,
    encode,
    event_of,
    lease_stream,
)
from speechd.durable import AppendRecord, SeqOutOfRange, Store

from ._cast import Admitted, JobRef
from ._intake import Intake

__all__ = ["LEASE_SKEW_MS", "Ownership", "lease_held"]

LEASE_SKEW_MS = 1000  # how far the hosts' clocks may disagree (see above)
_LOOKUPS = 32  # deferred casts whose tails are looked up at once


def now_ms() -> int:
    return time.time_ns() // 1_000_000


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


class Ownership:
    """Lease renewals of the casts this worker makes, and the deferred jobs."""

    def __init__(
        self,
        store: Store,
        intake: Intake,
        *,
        worker_id: str,
        lease_s: float,
        heartbeat_s: float,
        clock: Callable[[], float],
    ) -> None:
        self._store = store
        self._intake = intake
        self._worker_id = worker_id
        self.lease_s = lease_s
        self._heartbeat_s = heartbeat_s
        self._clock = clock
        self._foreign: dict[int, JobRef] = {}  # jobs whose cast another live worker owns
        # A foreign cast's tail when last seen moving, and when (our clock): its owner is alive.
        self._foreign_seen: dict[int, tuple[int, float]] = {}
        self._checked = 0.0

    @property
    def lease_ms(self) -> int:
        return round(self.lease_s * 1000)

    @property
    def deferred(self) -> int:
        return len(self._foreign)

    # -- leases of the casts this worker makes --------------------------------------------

    async def keep(self, casts: Iterable[Admitted]) -> None:
        """Renew the lease of each of `casts` (the loop's active casts, read afresh each
        round) that appended nothing for a third of it."""
        period = self.lease_s / 3
        while True:
            await asyncio.sleep(period / 2)
            for cast in casts:
                if not cast.dropped and self._clock() - cast.renewed >= period:
                    await self.renew(cast)

    async def renew_if_lapsing(self, cast: Admitted) -> None:
        """Before rendering: never on a lease half gone (the side task fell behind)."""
        if self._clock() - cast.renewed >= self.lease_s / 2:
            await self.renew(cast)

    async def renew(self, cast: Admitted) -> None:
        async with cast.lease_lock:
            if cast.dropped:
                return  # it ended (or was lost) meanwhile: a renewal now would outlive it
            sent = self._clock()
            lease = Lease(cast.attempt, self._worker_id, self.lease_ms)
            await self._store.append(lease_stream(cast.id), [AppendRecord(encode(lease))])
            cast.renewed = max(cast.renewed, sent)
            cast.lease_records += 1

    async def release(self, cast: Admitted) -> None:
        """Drop the renewals of a finished cast (nobody needs them once it ended): this
        worker's, or an earlier owner's (a cast past its first attempt may have some). The
        cast is dropped first (it ended), so a renewal waiting on the lock writes nothing
        after."""
        cast.dropped = True
        async with cast.lease_lock:
            if cast.lease_records or cast.attempt > 1:
                await self._store.delete(lease_stream(cast.id))
                cast.lease_records = 0

    # -- jobs left to other workers -------------------------------------------------------

    def defer(self, job: JobRef, tail: int) -> None:
        """Leave `job` to the worker holding its cast (looked at again every recheck)."""
        self._foreign[job.offset] = job
        self._foreign_seen[job.offset] = (tail, self._clock())

    async def recheck(self) -> list[JobRef]:
        """Every heartbeat (or half lease): finish deferred jobs whose cast ended; return the
        ones whose owner's lease ran out (to start again), in line order.

        A cast whose tail moved since the last look has a live owner (one read tells whether
        it ended); only one that stood still for a whole lease is read for its lease.
        """
        every = min(self._heartbeat_s, self.lease_s / 2)
        if not self._foreign or self._clock() - self._checked < every:
            return []
        self._checked = self._clock()
        back: list[JobRef] = []
        jobs = sorted(self._foreign.items())
        limit = asyncio.Semaphore(_LOOKUPS)

        async def tail_of(job: JobRef) -> int:
            async with limit:
                return await self._store.check_tail(cast_stream(job.id))

        tails = await asyncio.gather(*(tail_of(job) for _, job in jobs))
        for (offset, job), tail in zip(jobs, tails, strict=True):
            seen_tail, seen_at = self._foreign_seen.get(offset, (-1, 0.0))
            if tail != seen_tail:
                self._foreign_seen[offset] = (tail, self._clock())
                if tail and not await self._ended(job.id, tail):
                    continue  # its owner is at work
            elif self._clock() - seen_at < self.lease_s:
                continue  # still, but not for long enough for its lease to have run out
            head = await read_head(self._store, job.id)
            if head.tail == 0 or head.event == Event.EOS or head.event == Event.ERROR:
                self._drop(offset)
                await self._intake.finish(job)
                continue
            if not await lease_held(self._store, job.id, head, now_ms=now_ms()):
                self._drop(offset)
                back.append(job)
        return back

    def _drop(self, offset: int) -> None:
        del self._foreign[offset]
        self._foreign_seen.pop(offset, None)

    async def _ended(self, cast_id: str, tail: int) -> bool:
        """Whether the cast's record at `tail - 1` is its terminal one."""
        try:
            batch = await self._store.read(cast_stream(cast_id), tail - 1, max_records=1)
        except SeqOutOfRange:
            return False
        return bool(batch.records) and event_of(batch.records[0]) in (Event.EOS, Event.ERROR)

    async def held_by_another(self, job: JobRef, head: CastHead) -> bool:
        """Whether another worker holds `job`'s cast (then the job is deferred)."""
        owner = head.start.worker if head.start is not None else None
        if owner in (None, self._worker_id):
            return False
        if await lease_held(self._store, job.id, head, now_ms=now_ms()):
            self.defer(job, head.tail)
            return True
        return False
