"""Per-cast leases: the `start` carries one, appends and renewals keep it, a cast whose owner
stopped renewing is taken over with a new attempt, and `leases/<id>` never leaks."""

from __future__ import annotations

import asyncio
import threading
import time

from speechd.casts import read_head
from speechd.casts._records import meta_record
from speechd.casts.schema import (
    LEASES_PREFIX,
    Lease,
    Start,
    cast_stream,
    decode,
    encode,
    lease_stream,
    start_record,
)
from speechd.casts.schema import Meta as CastMeta
from speechd.durable import AppendRecord, Store
from speechd.worker._ownership import LEASE_SKEW_MS, lease_held
from speechd.worker._policy import DeadlinePolicy
from tests.support.engines import GatedEngine, expected_audio

from ._helpers import (
    Partitioned,
    check_layout,
    complete_audio,
    make_worker,
    records,
    running,
    submit_text,
    wait_ended,
)

TEXT = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen"
META = CastMeta("kokoro", "af_heart", 1.0, "pcm", 24_000, "t", 0, 10)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def started(store: Store, cid: str, *, lease_ms: int, worker: str = "w") -> int:
    """A cast with meta and a start by `worker`; returns the start's timestamp."""
    await store.append(cast_stream(cid), [meta_record(META)])
    start = Start(attempt=1, worker=worker, chunks=3, lease_ms=lease_ms)
    ack = await store.append(cast_stream(cid), [start_record(start)])
    return ack.timestamp


async def test_the_lease_runs_from_the_last_record_or_renewal(store: Store) -> None:
    at = await started(store, "c", lease_ms=2000)
    state = await read_head(store, "c")
    assert state.start is not None and state.start.lease_ms == 2000
    held = lambda t: lease_held(store, "c", state, now_ms=t)  # noqa: E731
    assert await held(at + 2000 + LEASE_SKEW_MS - 1)
    assert not await held(at + 2000 + LEASE_SKEW_MS)
    # A renewal of the same attempt by the same worker extends it ...
    renewal = await store.append(lease_stream("c"), [AppendRecord(encode(Lease(1, "w", 2000)))])
    assert await held(renewal.timestamp + 2000 + LEASE_SKEW_MS - 1)
    # ... one of an older attempt or by another worker does not.
    await store.append(lease_stream("c"), [AppendRecord(encode(Lease(0, "w", 2000)))])
    assert not await held(renewal.timestamp + 2000 + LEASE_SKEW_MS + 5000)


async def test_a_start_without_a_lease_falls_back_on_the_owners_heartbeats(store: Store) -> None:
    at = await started(store, "old", lease_ms=0, worker="nobody")
    state = await read_head(store, "old")
    assert not await lease_held(store, "old", state, now_ms=at)  # "nobody" never beat


async def test_an_owner_ahead_of_its_listener_renews_and_then_releases(store: Store) -> None:
    long_text = " ".join(f"word{i}" for i in range(30))  # ~3.5 s of audio
    cid = await submit_text(store, long_text)
    worker = make_worker(
        store, policy=DeadlinePolicy(comfortable_lead_s=0.3), lease_s=0.3, heartbeat_s=0.1
    )
    renewed: list[Lease] = []
    async with running(worker):
        deadline = time.monotonic() + 20
        while not renewed and time.monotonic() < deadline:
            tail = await store.check_tail(lease_stream(cid))
            if tail:
                batch = await store.read(lease_stream(cid), tail - 1)
                renewed += [decode(r.body, Lease) for r in batch.records]
            await asyncio.sleep(0.05)
        assert renewed, "the owner never renewed while ahead of its listener"
        assert renewed[0].worker == "w1" and renewed[0].attempt == 1
        await wait_ended(store, [cid], within=60)
        for _ in range(50):
            if await store.check_tail(lease_stream(cid)) == 0:
                break
            await asyncio.sleep(0.02)
    assert await store.check_tail(lease_stream(cid)) == 0  # released once the cast ended
    assert complete_audio(await records(store, cast_stream(cid))) == expected_audio(cid, long_text)


async def test_a_renewal_in_flight_as_the_cast_ends_leaves_no_lease_behind(
    store: Store,
) -> None:
    """Renewals are slow to land (a laggy link) and the lease short, so one is on its way
    when the cast ends: the release waits for it, then removes `leases/<id>`."""
    laggy = Partitioned(store, LEASES_PREFIX)
    laggy.cut(lag_s=0.2)
    long_text = " ".join(f"word{i}" for i in range(30))
    cid = await submit_text(store, long_text)
    worker = make_worker(
        laggy, policy=DeadlinePolicy(comfortable_lead_s=0.3), lease_s=0.3, heartbeat_s=0.1
    )
    async with running(worker):
        await wait_ended(store, [cid], within=60)
        await asyncio.sleep(0.5)  # longer than a renewal takes to land
    assert await store.check_tail(lease_stream(cid)) == 0
    assert complete_audio(await records(store, cast_stream(cid))) == expected_audio(cid, long_text)


async def test_a_cast_whose_owner_died_is_taken_over_after_its_lease(store: Store) -> None:
    cid = await submit_text(store, TEXT)
    gate = threading.Event()
    doomed_engine = GatedEngine("three", gate)
    doomed = make_worker(store, doomed_engine, worker_id="doomed", lease_s=0.4, heartbeat_s=0.1)
    task = asyncio.create_task(doomed.run(asyncio.Event()))
    try:
        await asyncio.to_thread(doomed_engine.blocked.wait, 5)
        task.cancel()  # dies mid-chunk: no more renewals, nothing said
        await asyncio.gather(task, return_exceptions=True)
        died = time.monotonic()
        heir = make_worker(store, worker_id="heir", lease_s=0.4, heartbeat_s=0.1)
        async with running(heir):
            assert await wait_ended(store, [cid]) == {cid: "eos"}
            # Not before the lease (and the allowed clock skew) ran out.
            assert time.monotonic() - died >= 0.4 + LEASE_SKEW_MS / 1000 - 0.2
    finally:
        gate.set()
    stream = await records(store, cast_stream(cid))
    attempts = check_layout(stream)
    assert [decode(a[0].body, Start).worker for a in attempts] == ["doomed", "heir"]
    assert all(decode(a[0].body, Start).lease_ms == 400 for a in attempts)
    assert complete_audio(stream) == expected_audio(cid, TEXT)
