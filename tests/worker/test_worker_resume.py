"""Resume by reference, as a listener hears it: after a takeover, a failed chunk or a kill -9,
the new attempt keeps every durable chunk (nothing copied), makes only the rest (a chunk is
synthesized twice at most when it was in flight), and the listener waits no longer than the
fault itself plus one chunk. The cost-model engine; a listener simulated from the durable
records' timestamps (`_listen`)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import signal
import subprocess
import tempfile
import threading
import time
import wave
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from harness import engines
from harness.engines import (
    CostEngine,
    FakeChunkPolicy,
    GatedEngine,
    chunked_text,
    expected_audio,
)
from harness.nats import NatsServer, drop_namespace, namespace_for
from speechd.audio import FORMATS, new_encoder
from speechd.casts import cast_audio, cast_status
from speechd.casts.schema import (
    Event,
    Start,
    WorkerNotice,
    cast_stream,
    decode,
    event_of,
    worker_stream,
)
from speechd.durable import Record, Store, open_store
from speechd.engine import EngineConfig
from speechd.worker import Supervisor, Worker, WorkerConfig
from speechd.worker._policy import DeadlinePolicy

from ._helpers import (
    check_layout,
    complete_audio,
    ended_stream,
    make_worker,
    playable,
    records,
    submit_text,
)
from ._helpers import running as running_worker
from ._listen import made_twice, stall_across, stalls

# 16 chunks of 2, 4, 8, then 16 words: about 5 s of audio at 3 ms a character, each long
# chunk 0.4 s of audio made in 0.2 s (rtf 0.5), the worker 1 s ahead of its listener.
TEXT = chunked_text(16)
ENGINE = {"rtf": 0.5, "overhead_s": 0.01, "audio_per_char": 0.003}
LEAD_S = 1.0
PLANNED = [c.text for c in CostEngine().plan(TEXT, "af_heart", FakeChunkPolicy())]
CHUNK_MS = 1000 * max(
    ENGINE["overhead_s"] + ENGINE["rtf"] * CostEngine(**ENGINE).audio_s(t, 1.0) for t in PLANNED
)
SLACK_MS = 500  # the store's appends and reads around one chunk, on a busy machine


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def texts(engine: CostEngine) -> list[str]:
    return [text for text, _ in engine.calls]


async def stop_blocked(worker: Worker, engine: GatedEngine, gate: threading.Event) -> None:
    """Run `worker` until its engine blocks in a chunk, then stop it (it abandons the chunk:
    `stop_grace_s=0`), and let the engine finish that chunk for nobody."""
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        assert await asyncio.to_thread(engine.blocked.wait, 20), "the worker never got there"
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        gate.set()
        await worker.idle()


async def listened_to(store: Store, cid: str, seconds: float, within: float = 30.0) -> None:
    """Wait until a listener who started at the first audio is `seconds` into the cast."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        stream = await records(store, cast_stream(cid))
        audio = [r for r in stream if event_of(r) == Event.AUDIO]
        if audio and now_ms() - audio[0].timestamp >= seconds * 1000:
            assert event_of(stream[-1]) != Event.EOS, "the cast ended before the fault"
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the cast never got going")


def starts(stream: list[Record]) -> list[tuple[Record, Start]]:
    return [(r, decode(r.body, Start)) for r in stream if event_of(r) == Event.START]


def check_resumed(stream: list[Record], fault_ms: int) -> int:
    """Assert nothing was copied and the listener waited at most for the fault plus one
    chunk; return that wait."""
    audio = [r for r in stream if event_of(r) == Event.AUDIO]
    assert len(audio) == len(playable(stream)) == len(PLANNED)  # every record is played once
    (_, _), (taken, second) = starts(stream)[:2]
    assert second.keep > 0 and second.kept[0].index == 0
    assert second.keep == sum(1 for r in audio if r.seq_num < taken.seq_num)
    waited = stall_across(stream, fault_ms)
    bound = (taken.timestamp - fault_ms) + CHUNK_MS + SLACK_MS
    assert waited <= bound, (waited, bound, stalls(stream))
    print(f"the listener waited {waited} ms; the fault and one chunk allow {bound} ms")
    return waited


# -- a takeover by another worker, on each backend ------------------------------------------


@contextlib.asynccontextmanager
async def two_handles(backend: str, tmp_path: Path, nats: NatsServer | None) -> AsyncIterator:
    if backend == "embedded":
        url = str(tmp_path / "data")
    else:
        assert nats is not None
        namespace = namespace_for(tmp_path.name)
        url = f"{nats.url}/?namespace={namespace}"
    first, second = await open_store(url), await open_store(url)
    try:
        yield first, second
    finally:
        await first.close()
        await second.close()
        if backend == "nats":
            assert nats is not None
            drop_namespace(nats.url, namespace)


@pytest.fixture(params=["embedded", pytest.param("nats", marks=pytest.mark.nats)])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_a_takeover_keeps_every_chunk_and_costs_the_listener_only_the_lease(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    nats = request.getfixturevalue("nats_server") if backend == "nats" else None
    async with two_handles(backend, tmp_path, nats) as (one, two):
        cid = await submit_text(one, TEXT)
        policy = DeadlinePolicy(comfortable_lead_s=LEAD_S)
        settings = {"lease_s": 0.6, "heartbeat_s": 0.1, "policy": policy}
        dead_engine, heir_engine = CostEngine(**ENGINE), CostEngine(**ENGINE)
        doomed = make_worker(one, dead_engine, worker_id="doomed", **settings)  # type: ignore[arg-type]
        task = asyncio.create_task(doomed.run(asyncio.Event()))
        await listened_to(one, cid, 1.5)
        task.cancel()  # it dies as it stands: no more appends, renewals or notices
        await asyncio.gather(task, return_exceptions=True)
        died = now_ms()
        heir = make_worker(two, heir_engine, worker_id="heir", **settings)  # type: ignore[arg-type]
        async with running_worker(heir):
            stream = await ended_stream(one, cid)
        await doomed.idle()
    assert complete_audio(stream) == expected_audio(cid, TEXT, engine=CostEngine(**ENGINE))
    check_resumed(stream, died)
    assert [s.worker for _, s in starts(stream)] == ["doomed", "heir"]
    assert made_twice(texts(dead_engine) + texts(heir_engine), PLANNED) <= 1


# -- a chunk that fails in the engine ---------------------------------------------------------


async def test_a_failed_chunk_is_retried_in_place_and_costs_the_listener_one_chunk(
    store: Store,
) -> None:
    words = TEXT.split()
    words[100] = "FLAKY"  # in the 8th chunk: it raises once
    text = " ".join(words)
    planned = [c.text for c in CostEngine().plan(text, "af_heart", FakeChunkPolicy())]
    engine = CostEngine(**ENGINE)
    cid = await submit_text(store, text)
    policy = DeadlinePolicy(comfortable_lead_s=LEAD_S)
    async with running_worker(make_worker(store, engine, policy=policy)):
        stream = await ended_stream(store, cid)
    attempts = check_layout(stream)
    assert len(attempts) == 2
    (_, _), (taken, second) = starts(stream)
    assert (second.keep, second.chunk_failures, second.deaths) == (len(attempts[0]) - 1, 1, 0)
    assert len([r for r in stream if event_of(r) == Event.AUDIO]) == len(planned)
    assert made_twice(texts(engine), planned) == 1  # the failed try, and the one that worked
    failed_ms = taken.timestamp  # the new attempt opens right as the chunk failed
    assert stall_across(stream, failed_ms) <= 2 * CHUNK_MS + SLACK_MS, stalls(stream)


# -- the listeners' clock ---------------------------------------------------------------------


async def test_a_resumed_cast_is_timed_on_its_listeners_clock(store: Store) -> None:
    """A worker that raced ahead stops; the next one measures the lead from the cast's first
    audio, kept from the last attempt: the listener still has seconds buffered, so it waits
    rather than racing on (a new attempt timed from its own start would not)."""
    cid = await submit_text(store, TEXT)
    gate = threading.Event()
    racing = GatedEngine(PLANNED[12], gate, rtf=0.01, audio_per_char=0.003)
    ahead = DeadlinePolicy(comfortable_lead_s=1e9)
    await stop_blocked(make_worker(store, racing, policy=ahead, stop_grace_s=0.0), racing, gate)
    status = await cast_status(store, cid, now_ms=now_ms())
    assert status.lead_ms is not None and status.lead_ms > 2500  # ~3.5 s of audio, all kept
    engine = CostEngine(rtf=0.01, audio_per_char=0.003)
    paced = make_worker(store, engine, policy=DeadlinePolicy(comfortable_lead_s=0.5))
    await paced.warm_up("af_heart")  # as a worker process does: it predicts from measurements
    async with running_worker(paced):
        stream = await ended_stream(store, cid)
    (_, _), (taken, resumed) = starts(stream)
    assert resumed.keep == 12 and resumed.origin_ms == playable(stream)[0].timestamp
    first_new = next(r for r in stream if r.seq_num > taken.seq_num and event_of(r) == Event.AUDIO)
    # It slept until its listener was about 0.5 s from the end of the kept audio.
    assert first_new.timestamp - taken.timestamp >= 1000, first_new.timestamp - taken.timestamp
    assert stall_across(stream, taken.timestamp) < 500, stalls(stream)


# -- every format continues as one file -----------------------------------------------------


def decoded(fmt: str, data: bytes) -> int:
    """Samples ffmpeg decodes from `data`, failing on any error (wav: Python's `wave` too)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"cast.{fmt}"
        path.write_bytes(data)
        raw = ["-f", "s16le", "-ar", "24000", "-ac", "1"] if fmt == "pcm" else []
        strict = [] if fmt == "wav" else ["-xerror"]  # a streaming wav's end reads as corrupt
        command = ["ffmpeg", "-nostdin", "-v", "error", *strict, *raw, "-i", str(path)]
        done = subprocess.run(
            [*command, "-f", "s16le", "-"],
            capture_output=True,
            check=False,
            timeout=60,
        )
    assert done.returncode == 0 and not done.stderr, done.stderr
    if fmt == "wav":
        with wave.open(io.BytesIO(data)) as w:
            assert len(w.readframes(10**9)) == len(done.stdout)
    return len(done.stdout) // 2


@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_resumed_cast_is_one_valid_file_in_every_format(store: Store, fmt: str) -> None:
    text = chunked_text(8)
    planned = [c.text for c in CostEngine().plan(text, "af_heart", FakeChunkPolicy())]
    cid = await submit_text(store, text, fmt=fmt)
    gate = threading.Event()
    stopped = GatedEngine(planned[5], gate)
    first = make_worker(store, stopped, encoders=new_encoder, stop_grace_s=0.0)
    await stop_blocked(first, stopped, gate)
    engine = CostEngine()
    async with running_worker(make_worker(store, engine, encoders=new_encoder)):
        stream = await ended_stream(store, cid)
    assert [(s.keep, s.deaths) for _, s in starts(stream)] == [(0, 0), (5, 0)]  # a stop is no death
    assert texts(engine) == planned[5:]  # only what was not made yet
    data = b"".join([b async for b in cast_audio(store, cid)])
    assert data == complete_audio(stream)
    whole = expected_audio(cid, text, fmt=fmt, encoders=new_encoder)
    if fmt in ("pcm", "wav", "flac"):
        assert data == whole  # continued byte for byte
    assert decoded(fmt, data) == decoded(fmt, whole)


# -- kill -9 under the supervisor -----------------------------------------------------------


@pytest.mark.slow
async def test_kill_9_mid_listen_costs_the_listener_only_the_restart(
    store: Store, store_dir: Path, tmp_path: Path
) -> None:
    log = tmp_path / "calls.txt"
    config = WorkerConfig(
        store=str(store_dir),
        engine=EngineConfig(),
        heartbeat_s=0.2,
        comfortable_lead_s=LEAD_S,
    )
    parts = engines.parts(log=str(log), **ENGINE)  # type: ignore[arg-type]
    supervisor = Supervisor(config, parts=parts, backoff_s=0.5)
    supervisor.start()
    try:
        cid = await submit_text(store, TEXT)
        await listened_to(store, cid, 1.5, within=60)
        pid = supervisor.pid
        assert pid is not None
        killed = now_ms()
        os.kill(pid, signal.SIGKILL)
        stream = await ended_stream(store, cid)
    finally:
        supervisor.stop()
    assert supervisor.exit_codes == [-signal.SIGKILL]
    ready = (await records(store, worker_stream(supervisor.worker_id)))[0]
    assert decode(ready.body, WorkerNotice).kind == "ready" and ready.timestamp > killed
    assert complete_audio(stream) == expected_audio(cid, TEXT, engine=CostEngine(**ENGINE))
    waited = check_resumed(stream, killed)
    restart_ms = ready.timestamp - killed
    assert waited <= restart_ms + CHUNK_MS + SLACK_MS
    calls = log.read_text().splitlines()
    assert made_twice(calls, PLANNED) <= 1
    print(f"restart {restart_ms} ms, the listener waited {waited} ms")
