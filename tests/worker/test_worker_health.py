"""Ready, heartbeat and stopped notices; the line of waiting casts; stopping mid-chunk."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time

import pytest

import speechd.worker._worker as worker_module
from harness.engines import VOICES, CostEngine, GatedEngine
from speechd.casts import ready_workers
from speechd.casts._queue import queue_depth, queue_position
from speechd.casts.schema import Start, WorkerNotice, cast_stream, decode, event_of, worker_stream
from speechd.durable import Store
from speechd.worker import ChunkTimes

from ._helpers import make_worker, records, running, submit_text, wait_ended


def now_ms() -> int:
    return int(time.time() * 1000)


async def test_ready_then_heartbeats_then_stopped(store: Store) -> None:
    assert await ready_workers(store, now_ms=now_ms()) == []
    async with running(make_worker(store, worker_id="w1", heartbeat_s=0.05)):
        await asyncio.sleep(0.2)
        ready = await ready_workers(store, now_ms=now_ms())
        assert [(n.worker, n.kind, n.voices, n.device) for n in ready] == [
            ("w1", "ready", list(VOICES), "cpu")
        ]
        assert ready[0].time_ms > now_ms() - 1000
        # Silent for more than three heartbeats: not ready.
        assert await ready_workers(store, now_ms=now_ms() + 1000) == []
    notices = [decode(r.body, WorkerNotice) for r in await records(store, worker_stream("w1"))]
    assert notices[0].kind == "ready" and notices[-1].kind == "stopped"
    assert {n.kind for n in notices[1:-1]} == {"heartbeat"}
    assert await ready_workers(store, now_ms=now_ms()) == []


async def test_a_restarted_worker_id_starts_a_fresh_health_stream(store: Store) -> None:
    for _ in range(2):
        async with running(make_worker(store, worker_id="w1")):
            pass
    kinds = [decode(r.body, WorkerNotice).kind for r in await records(store, worker_stream("w1"))]
    assert kinds == ["ready", "stopped"]


async def test_queue_position_follows_the_line(store: Store) -> None:
    ids = [await submit_text(store, f"cast {name} says hello") for name in ("a", "b", "c")]
    assert [await queue_position(store, cid) for cid in ids] == [0, 1, 2]
    assert await queue_depth(store) == 3
    gate = threading.Event()
    engine = GatedEngine("cast a", gate)
    try:
        async with running(make_worker(store, engine, max_active=1)):
            await asyncio.to_thread(engine.blocked.wait, 5)
            assert [await queue_position(store, cid) for cid in ids] == [None, 0, 1]
            gate.set()
            await wait_ended(store, ids)
    finally:
        gate.set()
    assert [await queue_position(store, cid) for cid in ids] == [None, None, None]
    assert await queue_depth(store) == 0


async def test_each_start_records_the_timing_its_plan_was_made_for(store: Store) -> None:
    ids = [await submit_text(store, f"cast number {n} says hello") for n in range(2)]
    engine = CostEngine()
    worker = make_worker(store, engine, times=ChunkTimes(prior_rtf=0.3), quantum_s=1.5)
    async with running(worker):
        await wait_ended(store, ids)
    starts = [decode((await records(store, cast_stream(cid)))[1].body, Start) for cid in ids]
    assert [(s.rtf, s.overhead_s, s.max_chunk_s) for s in starts] == engine.plans
    # Nothing measured yet: the prior, the device to itself, chunks capped at the quantum.
    assert engine.plans[0] == (0.3, 0.0, 5.0)


async def test_stopping_abandons_a_chunk_that_outlasts_the_grace(store: Store) -> None:
    gate = threading.Event()
    engine = GatedEngine("three", gate)
    cid = await submit_text(store, "one two three four")
    worker = make_worker(store, engine, stop_grace_s=0.1)
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        await asyncio.to_thread(engine.blocked.wait, 5)
        begun = time.monotonic()
        stop.set()
        await asyncio.wait_for(task, 5)
        assert time.monotonic() - begun < 2
    finally:
        gate.set()
        await worker.idle()
    stream = await records(store, cast_stream(cid))
    assert [event_of(r) for r in stream] == ["meta", "start", "audio"]
    last = decode((await records(store, worker_stream("w1")))[-1].body, WorkerNotice)
    assert last.kind == "stopped"


async def test_stopping_appends_a_chunk_that_finishes_within_the_grace(store: Store) -> None:
    gate = threading.Event()
    engine = GatedEngine("three", gate)
    cid = await submit_text(store, "one two three four five six seven eight nine ten")
    worker = make_worker(store, engine, stop_grace_s=5)
    try:
        async with running(worker) as stop:
            await asyncio.to_thread(engine.blocked.wait, 5)
            stop.set()
            await asyncio.sleep(0.1)
            gate.set()
    finally:
        gate.set()
    stream = await records(store, cast_stream(cid))
    assert [event_of(r) for r in stream] == ["meta", "start", "audio", "audio"]


def test_importing_the_worker_never_imports_torch() -> None:
    code = "import sys, speechd.worker; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


async def test_the_health_stream_starts_over_when_it_grows(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker_module, "ROTATE_NOTICES", 5)
    async with running(make_worker(store, worker_id="w1", heartbeat_s=0.02)):
        await asyncio.sleep(0.5)
        stream = await records(store, worker_stream("w1"))
        assert len(stream) <= 5
        assert decode(stream[0].body, WorkerNotice).kind == "ready"
        assert [n.worker for n in await ready_workers(store, now_ms=now_ms())] == ["w1"]
