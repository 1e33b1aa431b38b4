"""The worker on the real Kokoro-82M: a cast stopped mid-way and resumed by another attempt,
which keeps the chunks made (nothing made again) and continues the file: one valid mp3."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import pytest

from speechd.audio import new_encoder
from speechd.casts import cast_audio
from speechd.casts._records import audio_chunk
from speechd.casts.schema import Eos, Start, cast_stream, decode, event_of
from speechd.durable import Store
from speechd.engine import EngineConfig, load_engine
from speechd.text import ChunkPolicy
from speechd.worker import Worker, WorkerConfig
from tests.support.devices import DEVICE, RUNTIMES, skip_unless_runs

from ._helpers import check_layout, complete_audio, records, running, submit_text, wait_ended

pytestmark = pytest.mark.model

TEXT = (
    "The old lighthouse keeper climbed the spiral stairs every evening at dusk. "
    "From the top, he could see the fishing boats returning to the harbour, one by one."
)


@pytest.fixture(scope="module", params=RUNTIMES)
def engine(request: pytest.FixtureRequest, model_dir: Path) -> Any:
    """The real weights on each runtime in turn (`auto` would pick ONNX Runtime where it is
    installed, so torch is asked for by name too)."""
    skip_unless_runs(request.param)
    return load_engine(EngineConfig(model_dir=str(model_dir), device=DEVICE, engine=request.param))


def worker(store: Store, engine: Any, **settings: Any) -> Worker:
    return Worker(
        store,
        engine,
        WorkerConfig(worker_id="m1", **settings),
        chunk_policy=ChunkPolicy(),
        encoders=new_encoder,
    )


async def test_a_stopped_cast_resumes_keeping_its_chunks(store: Store, engine: Any) -> None:
    cid = await submit_text(store, TEXT, fmt="mp3")
    first = worker(store, engine, stop_grace_s=0.0)
    async with running(first):
        for _ in range(1200):  # the first chunk lands, then the worker stops mid-cast
            if any(event_of(r) == "audio" for r in await records(store, cast_stream(cid))):
                break
            await asyncio.sleep(0.05)
    stream = await records(store, cast_stream(cid))
    assert event_of(stream[-1]) == "audio"
    async with running(worker(store, engine)):
        assert await wait_ended(store, [cid], within=180) == {cid: "eos"}
    stream = await records(store, cast_stream(cid))
    attempts = check_layout(stream)
    assert len(attempts) == 2
    starts = [decode(a[0].body, Start) for a in attempts]
    timing = [(s.rtf, s.overhead_s, s.max_chunk_s) for s in starts]
    assert timing[1] == timing[0] and starts[1].failures == 0
    # The second attempt keeps what the first made and makes only the rest.
    made = attempts[0][1:]
    assert made and starts[1].keep == len(made)
    assert starts[1].model == starts[0].model == engine.fingerprint  # names the runtime too
    assert starts[0].model.endswith(f":{engine.runtime}")
    texts = [audio_chunk(r).text for r in [*made, *attempts[1][1:]]]
    assert len(set(texts)) == len(texts) == decode(stream[-1].body, Eos).chunks  # each once
    audio = complete_audio(stream)
    assert b"".join([b async for b in cast_audio(store, cid)]) == audio
    result = await asyncio.to_thread(
        subprocess.run,
        ["ffmpeg", "-v", "error", "-xerror", "-i", "pipe:0", "-f", "null", "-"],
        input=audio,
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0 and not result.stderr, result.stderr
    eos = decode(stream[-1].body, Eos)
    assert 6_000 < eos.audio_ms < 20_000  # two sentences of speech


async def test_a_device_out_of_memory_mid_cast_is_made_smaller_without_a_gap(
    store: Store, model_dir: Path
) -> None:
    """Issue 30: a CUDA device (FakeCuda: the CPU standing in, raising torch's own
    OutOfMemoryError past 40 phonemes) that runs out of memory in a cast's later, longer
    chunks: each is made in pieces, the cast ends in its one attempt (the listener hears no
    failure), and its audio has no gap where pieces join, and reads back as the text."""
    import numpy as np

    from harness.speech import recall, transcribe_pcm16
    from tests.support.devices import FakeCudaOpener

    opener = FakeCudaOpener(str(model_dir))
    config = EngineConfig(model_dir=str(model_dir), device="cuda", engine="torch")
    engine = load_engine(config, open_runtime=opener)
    opener.device.fits = 40
    cid = await submit_text(store, TEXT, fmt="pcm")
    async with running(worker(store, engine)):
        assert await wait_ended(store, [cid], within=600) == {cid: "eos"}
    assert opener.device.failed, "no chunk ran out of memory: nothing was tested"
    assert engine.device == "cuda:0" and engine.fallback == ""
    stream = await records(store, cast_stream(cid))
    assert len(check_layout(stream)) == 1
    audio = complete_audio(stream)
    pcm = np.frombuffer(audio, dtype="<i2").astype(np.float32) / 32768
    frames = pcm[: len(pcm) // 480 * 480].reshape(-1, 480)  # 20 ms
    rms = float(np.sqrt(np.mean(pcm**2)))
    quiet = np.sqrt(np.mean(frames**2, axis=1)) < 0.1 * rms
    runs = "".join("q" if q else " " for q in quiet).split()
    assert max(map(len, runs), default=0) * 0.02 < 0.8  # no dead air longer than a sentence break
    heard = await asyncio.to_thread(transcribe_pcm16, audio, engine.sample_rate)
    assert recall(TEXT, heard) >= 0.7, heard


async def test_a_cast_after_the_idle_unload_wakes_the_real_model(
    store: Store, engine: Any
) -> None:
    """Issue 30 on the real weights: the worker gives the model back after its idle time, a
    cast then takes it again, and its first audio lands only after the model is held."""
    from speechd.casts.schema import WorkerNotice, worker_stream

    idle = worker(store, engine, idle_unload_s=0.5, heartbeat_s=0.1)
    async with running(idle):
        for _ in range(1200):
            if not engine.resident:
                break
            await asyncio.sleep(0.05)
        assert not engine.resident
        cid = await submit_text(store, TEXT.split(". ")[0] + ".", fmt="pcm")
        assert await wait_ended(store, [cid], within=300) == {cid: "eos"}
    said = await records(store, worker_stream("m1"))
    notices = [(r.timestamp, decode(r.body, WorkerNotice)) for r in said]
    waking = next(at for at, n in notices if n.state == "waking")
    held = next(at for at, n in notices if at >= waking and n.state == "" and n.kind == "heartbeat")
    stream = await records(store, cast_stream(cid))
    first = next(r for r in stream if event_of(r) == "audio")
    assert first.timestamp >= held >= waking
    assert engine.resident and engine.load_s > 0
