"""The worker as a process: run_worker's exit codes, the supervisor, kill -9 and restart."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from speechd.casts import ready_workers
from speechd.casts.schema import (
    JOBS,
    JOBS_DEAD,
    DeadJob,
    Event,
    Failure,
    WorkerNotice,
    cast_stream,
    decode,
    event_of,
    worker_stream,
)
from speechd.config import load_settings
from speechd.durable import Store
from speechd.engine import EngineConfig
from speechd.errors import ModelUnavailable
from speechd.worker import Parts, Supervisor, WorkerConfig, run_worker
from speechd.worker._process import EXIT_MODEL_UNAVAILABLE, EXIT_OK
from tests.support import engines
from tests.support.engines import expected_audio

from ._helpers import (
    check_layout,
    complete_audio,
    cursor,
    ended,
    records,
    submit_text,
    wait_ended,
)


def config(store_dir: Path, **settings: object) -> WorkerConfig:
    return WorkerConfig(store=str(store_dir), engine=EngineConfig(), heartbeat_s=0.2, **settings)  # type: ignore[arg-type]


def no_model(config: object) -> object:
    raise ModelUnavailable("no weights in /nowhere; set --model-dir")


def test_a_missing_model_exits_with_its_own_code(store_dir: Path) -> None:
    parts = Parts(load_engine=no_model, chunk_policy=engines.FakeChunkPolicy)
    assert run_worker(config(store_dir), parts=parts) == EXIT_MODEL_UNAVAILABLE


def test_run_worker_stops_on_its_event(store_dir: Path) -> None:
    stop = threading.Event()
    codes: list[int] = []
    thread = threading.Thread(
        target=lambda: codes.append(
            run_worker(config(store_dir, worker_id="t1"), stop=stop, parts=engines.parts())
        )
    )
    thread.start()
    time.sleep(1.0)
    stop.set()
    thread.join(10)
    assert codes == [EXIT_OK]

    async def notices() -> list[str]:
        from speechd.durable import open_store

        async with await open_store(str(store_dir)) as store:
            stream = await records(store, worker_stream("t1"))
            return [decode(r.body, WorkerNotice).kind for r in stream]

    kinds = asyncio.run(notices())
    assert kinds[0] == "ready" and kinds[-1] == "stopped"


async def wait_ready(store: Store, worker_id: str, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        ready = await ready_workers(store, now_ms=int(time.time() * 1000))
        if any(n.worker == worker_id for n in ready):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"worker {worker_id} not ready in {within} s")


async def audio_records(store: Store, cid: str) -> int:
    return sum(1 for r in await records(store, cast_stream(cid)) if event_of(r) == Event.AUDIO)


TEXTS = [" ".join(f"{word}{n}" for word in ("alpha", "bravo", "charlie") * 20) for n in range(4)]


@pytest.mark.slow
async def test_kill_9_mid_cast_then_restart_loses_nothing(store: Store, store_dir: Path) -> None:
    supervisor = Supervisor(
        config(store_dir), parts=engines.parts(rtf=0.3, overhead_s=0.01), backoff_s=2.0
    )
    supervisor.start()
    try:
        await wait_ready(store, supervisor.worker_id)
        ids = [await submit_text(store, text) for text in TEXTS]
        # Wait until several casts are under way, none finished.
        deadline = time.monotonic() + 30
        while sum([await audio_records(store, cid) > 0 for cid in ids]) < 2:
            assert time.monotonic() < deadline, "casts never got going"
            await asyncio.sleep(0.02)
        pid = supervisor.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        for _ in range(500):  # the supervisor sees it die
            if supervisor.exit_codes:
                break
            await asyncio.sleep(0.01)
        # Dead now, restarting in 2 s: the committed cursor passed no unfinished job.
        committed = await cursor(store)
        for cid in ids[:committed]:
            assert await ended(store, cid) == "eos"
        assert any([await ended(store, cid) is None for cid in ids])
        await wait_ended(store, ids, within=60)
    finally:
        supervisor.stop()
    assert supervisor.restarts == 1
    assert supervisor.exit_codes == [-signal.SIGKILL]
    resumed = 0
    for cid, text in zip(ids, TEXTS, strict=True):
        stream = await records(store, cast_stream(cid))
        # The latest attempt has every chunk exactly once, in order; the bytes are the same
        # as an uninterrupted cast's.
        assert complete_audio(stream) == expected_audio(cid, text)
        resumed += len(check_layout(stream)) > 1
    assert resumed >= 1
    assert await cursor(store) == len(ids)


@pytest.mark.slow
async def test_graceful_stop_ends_the_child_cleanly(store: Store, store_dir: Path) -> None:
    supervisor = Supervisor(config(store_dir), parts=engines.parts())
    supervisor.start()
    await wait_ready(store, supervisor.worker_id)
    assert supervisor.stop(timeout=15) == EXIT_OK
    assert not supervisor.alive and supervisor.restarts == 0
    last = (await records(store, worker_stream(supervisor.worker_id)))[-1]
    assert decode(last.body, WorkerNotice).kind == "stopped"
    assert await ready_workers(store, now_ms=int(time.time() * 1000)) == []


@pytest.mark.slow
async def test_a_chunk_that_kills_the_worker_ends_in_jobs_dead(
    store: Store, store_dir: Path
) -> None:
    supervisor = Supervisor(config(store_dir, retries=1), parts=engines.parts(), backoff_s=0.1)
    supervisor.start()
    try:
        await wait_ready(store, supervisor.worker_id)
        bad = await submit_text(store, "this text will CRASH the worker every time")
        good = await submit_text(store, "while this one is perfectly fine")
        ends = await wait_ended(store, [bad, good], within=60)
    finally:
        supervisor.stop()
    assert ends == {bad: "error", good: "eos"}
    assert supervisor.restarts == 2  # two attempts died at the same chunk; the third gave up
    stream = await records(store, cast_stream(bad))
    assert "2 times" in decode(stream[-1].body, Failure).message
    dead = [decode(r.body, DeadJob) for r in await records(store, JOBS_DEAD)]
    assert [d.id for d in dead] == [bad]
    # The two jobs, and no more (they are trimmed once the cursor passed them).
    assert await store.check_tail(JOBS) == 2


def test_the_commands_defaults_are_the_workers() -> None:
    """`speechd serve` and `speechd worker` with no worker flags run the worker as
    `WorkerConfig`'s defaults say (the settings mapped to it in one place,
    `Settings.worker_config`)."""
    settings = load_settings({}, {})
    config = settings.worker_config()
    assert config == WorkerConfig(store=settings.store_url, engine=settings.engine_config())
