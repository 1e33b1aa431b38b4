"""`--idle-unload` through the real worker loop, on a cost model that holds a real model's
worth of memory (given back on unload, taken again on load) and takes a measured time to
load: the worker gives it back after the idle time and says so, a cast wakes it and its first
audio waits for the load and no longer (the load is not counted as the chunk's cost, so no
start hold and no plan is made from it), casts arriving during the wake are all served by one
load, and a device that stays full makes the worker unavailable without failing the cast."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from pathlib import Path

import msgspec
import numpy as np
import pytest

from speechd.casts import last_notice, worker_health
from speechd.casts._records import audio_chunk
from speechd.casts.schema import Eos, Event, WorkerNotice, decode, event_of, worker_stream
from speechd.durable import Store, open_store
from speechd.engine import EngineConfig
from speechd.errors import ModelUnavailable
from speechd.worker import Parts, WorkerConfig, run_worker
from speechd.worker._process import EXIT_MODEL_UNAVAILABLE
from tests.support.engines import CostEngine, FakeChunk, FakeChunkPolicy, FakeSynthesis

from ._helpers import check_layout, ended_stream, make_worker, records, running, submit_text

LOAD_S = 0.6


class ResidentCostEngine(CostEngine):
    """The cost model with a model to give back: `model_bytes` of real memory while held,
    `load_s` to take it again. It refuses to speak without it, so a worker that renders
    before its wake fails the test."""

    def __init__(self, *, load_s: float = LOAD_S, model_bytes: int = 64 << 20, **cost: float):
        super().__init__(**cost)
        self.load_cost_s = load_s
        self.model_bytes = model_bytes
        self._model: np.ndarray | None = np.ones(model_bytes, dtype=np.uint8)
        self.load_s = load_s
        self.loads = 0
        self.unloads = 0
        self.loading = threading.Event()

    @property
    def resident(self) -> bool:
        return self._model is not None

    def unload(self) -> None:
        self._model = None
        self.unloads += 1

    def load(self) -> float:
        if self._model is not None:
            return 0.0
        self.loading.set()
        started = time.perf_counter()
        time.sleep(self.load_cost_s)
        self._model = np.ones(self.model_bytes, dtype=np.uint8)
        self.loads += 1
        self.load_s = time.perf_counter() - started
        return self.load_s

    def synthesize(
        self, chunk: FakeChunk, voice: str, speed: float, *, seed: int | None = None
    ) -> FakeSynthesis:
        assert self._model is not None, "asked to speak without its model"
        return super().synthesize(chunk, voice, speed, seed=seed)


async def _until(check: object, within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while not await check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "it did not happen in time"
        await asyncio.sleep(0.02)


async def _notices(store: Store, worker: str = "w1") -> list[WorkerNotice]:
    return [decode(r.body, WorkerNotice) for r in await records(store, worker_stream(worker))]


async def _first_audio_ms(store: Store, cid: str) -> tuple[int, int]:
    """(the first audio record's timestamp, its start hold) of cast `cid`."""
    stream = await ended_stream(store, cid)
    first = next(r for r in stream if event_of(r) == Event.AUDIO)
    return first.timestamp, audio_chunk(first).hold_ms


async def test_an_idle_worker_gives_its_model_back_and_a_cast_wakes_it(store: Store) -> None:
    engine = ResidentCostEngine()
    worker = make_worker(store, engine, idle_unload_s=0.3, heartbeat_s=0.1)
    async with running(worker):

        async def says_idle() -> bool:
            found = await last_notice(store, "w1")
            return found is not None and found[1].state == "idle"

        await _until(says_idle)  # the worker is still ready: it beats, saying so
        assert engine.unloads == 1
        found = await last_notice(store, "w1")
        assert found is not None and found[1].kind == "heartbeat"

        submitted_ms = time.time_ns() // 1_000_000
        cid = await submit_text(store, "wake up and speak " * 6)
        stream = await ended_stream(store, cid)
        assert event_of(stream[-1]) == Event.EOS
        check_layout(stream)
        first_ms, hold_ms = await _first_audio_ms(store, cid)
        # Its first audio waited for the load ...
        assert first_ms - submitted_ms >= 1000 * LOAD_S * 0.9
        # ... and the load was not taken for the chunk's cost: no start hold from it, and
        # the cast's compute is the chunks' alone.
        assert hold_ms == 0
        eos = decode(stream[-1].body, Eos)
        assert eos.gen_ms < 1000 * LOAD_S / 2
        assert engine.loads == 1

        states = [n.state for n in await _notices(store) if n.kind == "heartbeat"]
        assert "waking" in states
        waking = states.index("waking")
        assert "" in states[waking:]  # held again once the wake was done

        async def unloaded_again() -> bool:
            return engine.unloads == 2

        await _until(unloaded_again)  # nothing to make again: given back again


async def test_casts_arriving_during_the_wake_are_all_served_by_one_load(store: Store) -> None:
    engine = ResidentCostEngine(load_s=1.0)
    worker = make_worker(store, engine, idle_unload_s=0.2, heartbeat_s=0.1)
    async with running(worker):

        async def unloaded() -> bool:
            return engine.unloads == 1

        await _until(unloaded)
        first = await submit_text(store, "the first cast wakes the model " * 3)
        await asyncio.to_thread(engine.loading.wait, 10)
        others = [await submit_text(store, f"cast {n} arrives meanwhile " * 3) for n in (2, 3)]
        for cid in (first, *others):
            stream = await ended_stream(store, cid)
            assert event_of(stream[-1]) == Event.EOS
            check_layout(stream)
        assert engine.loads == 1


async def test_without_idle_unload_the_model_stays(store: Store) -> None:
    engine = ResidentCostEngine()
    worker = make_worker(store, engine, heartbeat_s=0.05)
    async with running(worker):
        await asyncio.sleep(0.5)
        cid = await submit_text(store, "nothing to wake")
        await ended_stream(store, cid)
    assert engine.unloads == 0 and engine.loads == 0


class FullDevice(CostEngine):
    """An engine whose named CUDA device stays out of memory for a cast's chunk (what the
    engine's resident runtime raises then), after a warm-up that fitted."""

    device = "cuda:0"

    def synthesize(
        self, chunk: FakeChunk, voice: str, speed: float, *, seed: int | None = None
    ) -> FakeSynthesis:
        if "fit" not in chunk.text:
            return super().synthesize(chunk, voice, speed, seed=seed)
        raise ModelUnavailable(
            "cuda:0 stayed out of memory for a chunk of 40 phonemes, made in pieces and again "
            "with its cache released (CUDA out of memory. Tried to allocate 2.00 GiB)"
        )


def full_device(config: object) -> CostEngine:
    return FullDevice()


def healthy(config: object) -> CostEngine:
    return CostEngine()


@pytest.mark.slow
async def test_a_device_that_stays_full_makes_the_worker_unavailable_not_the_cast(
    tmp_path: Path,
) -> None:
    store_dir = tmp_path / "data"
    config = WorkerConfig(
        store=str(store_dir), engine=EngineConfig(), worker_id="w-full", heartbeat_s=0.1
    )
    store = await open_store(str(store_dir))
    try:
        stop = threading.Event()
        run = asyncio.ensure_future(
            asyncio.to_thread(
                run_worker,
                config,
                stop=stop,
                parts=Parts(load_engine=full_device, chunk_policy=FakeChunkPolicy),
            )
        )
        cid = await submit_text(store, "fit fit this chunk does not fit the device")
        assert await asyncio.wait_for(run, 30) == EXIT_MODEL_UNAVAILABLE
        found = await last_notice(store, "w-full")
        assert found is not None
        said = found[1]
        assert said.kind == "unavailable" and "stayed out of memory" in said.error
        assert said.cast == "" and said.chunk == -1  # no cast is blamed for the device
        stream = await records(store, f"pub/casts/{cid}")
        assert Event.ERROR not in [event_of(r) for r in stream]
        # The next life (on a device with room) makes the cast whole.
        again = asyncio.ensure_future(
            asyncio.to_thread(
                run_worker,
                config,
                stop=stop,
                parts=Parts(load_engine=healthy, chunk_policy=FakeChunkPolicy),
            )
        )
        ended = await ended_stream(store, cid)
        assert event_of(ended[-1]) == Event.EOS
        stop.set()
        await asyncio.wait_for(again, 30)
    finally:
        await store.close()


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The engine tests' tiny random Kokoro (the real code path; its audio is noise)."""
    from tests.support.tiny_model import make_tiny_model_dir

    return make_tiny_model_dir(tmp_path_factory.mktemp("kokoro-tiny"))


def _auto_on_a_rushed_device(model_dir: str, config: EngineConfig) -> object:
    """The engine's own load under `--device auto`, on a stand-in CUDA device that times
    speech 27% short: the sanity check sends it to the CPU."""
    from speechd.engine import load_engine
    from tests.support.devices import FakeCudaOpener

    auto = msgspec.structs.replace(config, model_dir=model_dir, device="auto", engine="torch")
    return load_engine(auto, open_runtime=FakeCudaOpener(model_dir, timing=0.73))


@pytest.mark.slow
async def test_under_auto_a_device_left_for_the_cpu_is_said_in_every_notice(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    store_dir = tmp_path / "data"
    config = WorkerConfig(
        store=str(store_dir), engine=EngineConfig(), worker_id="w-auto", heartbeat_s=0.2
    )
    load = functools.partial(_auto_on_a_rushed_device, str(tiny_model_dir))
    stop = threading.Event()
    run = asyncio.ensure_future(
        asyncio.to_thread(run_worker, config, stop=stop, parts=Parts(load_engine=load))
    )
    store = await open_store(str(store_dir))
    try:

        async def ready() -> bool:
            health = await worker_health(store, now_ms=time.time_ns() // 1_000_000)
            return bool(health.ready) or run.done()

        await _until(ready, within=600)
        health = await worker_health(store, now_ms=time.time_ns() // 1_000_000)
        assert [w.device for w in health.ready] == ["cpu"]
        assert "predicts durations" in health.ready[0].fallback
        assert "shorter than the CPU" in health.ready[0].fallback
        notices = await _notices(store, "w-auto")
        assert all(n.fallback for n in notices if n.kind in ("ready", "heartbeat"))
    finally:
        stop.set()
        await asyncio.wait_for(run, 60)
        await store.close()
