"""The double encoder fault (issue 27 item 11): a chunk whose encoder gave no checkpoint (its
records carry no `k`), then the next chunk's encoder fails. The new attempt must go on from
the last record that has a checkpoint, as a worker resuming after a crash does: keeping the
records up to it, making the chunk after it again, with the encoder from that checkpoint. It
kept every record and went on with the older checkpoint's encoder, so the file it made was out
of step with itself."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.engines import CostEngine, FakeChunkPolicy, chunked_text, expected_audio
from speechd.audio import new_encoder
from speechd.casts._records import audio_chunk
from speechd.casts.schema import Event, Start, decode, event_of
from speechd.durable import Store

from ._helpers import complete_audio, ended_stream, make_worker, submit_text
from ._helpers import running as running_worker

TEXT = chunked_text(6)
NO_CHECKPOINT = 2  # the chunk (0-based) whose encoder gives no checkpoint; the next one fails


class DoubleFault:
    """`new_encoder`'s encoders, except that after chunk `NO_CHECKPOINT` no checkpoint can be
    taken, and the first encode of the chunk after it fails (each once, across attempts)."""

    def __init__(self) -> None:
        self.checkpoints = 0
        self.armed = False
        self.fired = False

    def __call__(self, fmt: str, sample_rate: int, *, resume: bytes | None = None) -> Any:
        return _Faulty(new_encoder(fmt, sample_rate, resume=resume), self)


class _Faulty:
    def __init__(self, inner: Any, faults: DoubleFault) -> None:
        self._inner = inner
        self._faults = faults
        self.format = inner.format
        self.fingerprint = inner.fingerprint

    def encode(self, pcm: np.ndarray, *, final: bool = False) -> bytes:
        if self._faults.armed and not self._faults.fired:
            self._faults.fired = True
            raise RuntimeError("the encoder broke mid-chunk")
        return bytes(self._inner.encode(pcm, final=final))

    def checkpoint(self) -> bytes:
        taken = self._faults.checkpoints
        self._faults.checkpoints += 1
        if taken == NO_CHECKPOINT and not self._faults.armed:
            self._faults.armed = True
            raise RuntimeError("no checkpoint this time")
        return bytes(self._inner.checkpoint())


def decoded_samples(fmt: str, data: bytes) -> int:
    """Samples ffmpeg decodes from `data`, failing on any decoding error."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"cast.{fmt}"
        path.write_bytes(data)
        done = subprocess.run(
            ["ffmpeg", "-nostdin", "-v", "error", "-xerror", "-i", str(path), "-f", "s16le", "-"],
            capture_output=True,
            check=True,
            timeout=60,
        )
        return len(done.stdout) // 2


@pytest.mark.parametrize("fmt", ["flac", "mp3", "opus"])
async def test_a_double_encoder_fault_resumes_aligned(store: Store, fmt: str) -> None:
    planned = [c.text for c in CostEngine().plan(TEXT, "af_heart", FakeChunkPolicy())]
    cid = await submit_text(store, TEXT, fmt=fmt)
    engine = CostEngine()
    async with running_worker(make_worker(store, engine, encoders=DoubleFault())):
        stream = await ended_stream(store, cid)
    assert event_of(stream[-1]) == Event.EOS
    audio = [r for r in stream if event_of(r) == Event.AUDIO]
    first = [audio_chunk(r) for r in audio if audio_chunk(r).attempt == 1]
    # Attempt 1 made chunks 0..NO_CHECKPOINT (the last without a checkpoint); attempt 2 keeps
    # the records up to the last checkpoint, and makes the chunk without one again.
    with_checkpoint = [c for c in first if c.resume]
    assert len(with_checkpoint) == NO_CHECKPOINT
    second = [decode(r.body, Start) for r in stream if event_of(r) == Event.START][-1]
    assert second.keep == with_checkpoint[-1].index + 1
    made = [text for text, _ in engine.calls]
    assert made.count(planned[NO_CHECKPOINT]) == 2 and made.count(planned[-1]) == 1
    data = complete_audio(stream)
    whole = expected_audio(cid, TEXT, fmt=fmt, encoders=new_encoder)
    if fmt == "flac":
        assert data == whole  # continued byte for byte
    assert decoded_samples(fmt, data) == decoded_samples(fmt, whole)
