"""Two workers on one store: leases decide who makes a cast, and the condition on every
append keeps a stale owner from interleaving with the one that took over."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from harness.engines import CostEngine, GatedEngine, expected_audio
from speechd.casts.schema import LEASES_PREFIX, Start, cast_stream, decode
from speechd.durable import Store, open_store

from ._helpers import (
    Partitioned,
    check_layout,
    complete_audio,
    cursor,
    make_worker,
    records,
    running,
    submit_text,
    wait_ended,
)

TEXT = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen"


async def test_a_stale_worker_cannot_interleave_with_the_one_that_took_over(
    store: Store, store_dir: Path
) -> None:
    cid = await submit_text(store, TEXT)
    gate = threading.Event()
    stale_engine = GatedEngine("three", gate)  # blocks in chunk 1
    other = Partitioned(await open_store(str(store_dir)), LEASES_PREFIX)
    try:
        stale = make_worker(other, stale_engine, worker_id="stale", heartbeat_s=0.1, lease_s=0.6)
        async with running(stale):
            await asyncio.to_thread(stale_engine.blocked.wait, 5)
            # The stale worker's renewals stop reaching the store: its lease runs out ...
            other.cut()
            live = make_worker(store, worker_id="live", heartbeat_s=0.1, lease_s=0.6)
            async with running(live):
                assert await wait_ended(store, [cid]) == {cid: "eos"}
                # ... then wakes up and finishes its chunk: its append must fail.
                gate.set()
                for _ in range(100):
                    if cid not in stale.active:
                        break
                    await asyncio.sleep(0.02)
                assert cid not in stale.active
                await asyncio.sleep(0.2)
    finally:
        gate.set()
        await other.close()
    stream = await records(store, cast_stream(cid))
    attempts = check_layout(stream)
    assert [decode(a[0].body, Start).worker for a in attempts] == ["stale", "live"]
    assert len(attempts[0]) == 2  # start + chunk 0: the stale chunk 1 never landed
    assert complete_audio(stream) == expected_audio(cid, TEXT)
    assert await cursor(store) == 1


async def test_a_live_owner_is_left_alone(store: Store, store_dir: Path) -> None:
    gate = threading.Event()
    cid = await submit_text(store, TEXT)
    owner_engine = GatedEngine("three", gate)
    other = await open_store(str(store_dir))
    try:
        owner = make_worker(other, owner_engine, worker_id="owner", heartbeat_s=0.1, lease_s=0.3)
        async with running(owner):
            await asyncio.to_thread(owner_engine.blocked.wait, 5)
            bystander_engine = CostEngine()
            bystander = make_worker(
                store, bystander_engine, worker_id="bystander", heartbeat_s=0.1, lease_s=0.3
            )
            async with running(bystander):
                # Several leases long: the owner, stuck in a chunk, renews its lease.
                await asyncio.sleep(2.0)
                assert bystander_engine.calls == []
                gate.set()
                assert await wait_ended(store, [cid]) == {cid: "eos"}
                for _ in range(100):  # the bystander finishes the job it left alone
                    if bystander.waiting == 0 and bystander.deferred == 0:
                        break
                    await asyncio.sleep(0.05)
                assert bystander.deferred == 0
    finally:
        gate.set()
        await other.close()
    attempts = check_layout(await records(store, cast_stream(cid)))
    assert [decode(a[0].body, Start).worker for a in attempts] == ["owner"]


async def test_two_live_workers_share_a_queue_without_interleaving(
    store: Store, store_dir: Path
) -> None:
    texts = [f"{TEXT} number {n}" for n in range(6)]
    ids = [await submit_text(store, text) for text in texts]
    other = await open_store(str(store_dir))
    try:
        async with (
            running(make_worker(store, CostEngine(), worker_id="a")),
            running(make_worker(other, CostEngine(), worker_id="b")),
        ):
            ends = await wait_ended(store, ids)
    finally:
        await other.close()
    assert set(ends.values()) == {"eos"}
    for cid, text in zip(ids, texts, strict=True):
        assert complete_audio(await records(store, cast_stream(cid))) == expected_audio(cid, text)
