"""The worker on the real Kokoro-82M: a cast stopped mid-way and resumed by another attempt,
which keeps the chunks made (nothing made again) and continues the file: one valid mp3."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import pytest

from speechd.audio import new_encoder
from speechd.casts import Eos, Start, audio_chunk, cast_audio, cast_stream, decode, event_of
from speechd.durable import Store
from speechd.engine import ChunkPolicy, EngineConfig, load_engine
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
