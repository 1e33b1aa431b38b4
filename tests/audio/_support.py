"""Shared by the audio tests: test signals, chunked encoding, and decoding with real decoders."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from speechd.audio import LAYOUTS, SAMPLE_RATE, new_encoder, standalone_record

FFMPEG = shutil.which("ffmpeg")

# Uneven chunk lengths: a first clause, a very short chunk (less than any codec frame), a long
# one, a 1-sample one, odd lengths, and an empty final chunk (the worker's flush).
CHUNKS: tuple[int, ...] = (9_000, 300, 31_000, 1, 13_001, 4_700, 27_777, 0)


def speech_like(n: int, seed: int = 0) -> np.ndarray:
    """A voiced-speech-like test signal: a gliding 90-250 Hz fundamental with harmonics under a
    syllable-rate envelope, plus a little breath noise; float32 in [-0.6, 0.6]."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) / SAMPLE_RATE
    f0 = 150 + 60 * np.sin(2 * np.pi * 0.7 * t) + 30 * np.sin(2 * np.pi * 2.3 * t)
    phase = 2 * np.pi * np.cumsum(f0) / SAMPLE_RATE
    voiced = sum(np.sin(h * phase) / h for h in range(1, 12))
    envelope = 0.55 + 0.45 * np.sin(2 * np.pi * 4.0 * t) ** 2
    x = 0.25 * voiced * envelope + 0.01 * rng.standard_normal(n)
    return np.clip(x, -0.6, 0.6).astype(np.float32)


def sine(n: int, freq: float = 440.0, amp: float = 0.5) -> np.ndarray:
    return (amp * np.sin(2 * np.pi * freq * np.arange(n) / SAMPLE_RATE)).astype(np.float32)


def boundaries(chunks: Sequence[int] = CHUNKS) -> list[int]:
    """PCM sample positions where one chunk ends and the next begins."""
    return [int(b) for b in np.cumsum(chunks)[:-1]]


def encode_chunks(fmt: str, pcm: np.ndarray, chunks: Sequence[int] = CHUNKS) -> list[bytes]:
    """The records of one cast: `pcm` cut into `chunks` (which sum to len(pcm)), the last final."""
    assert sum(chunks) == len(pcm)
    encoder = new_encoder(fmt)
    records = []
    pos = 0
    for i, n in enumerate(chunks):
        records.append(encoder.encode(pcm[pos : pos + n], final=i == len(chunks) - 1))
        pos += n
    return records


def ffmpeg_decode(fmt: str, data: bytes, *, rate: int | None = None) -> tuple[np.ndarray, str]:
    """Decode a whole file with the ffmpeg command line: (float32 mono samples, stderr).

    `rate` resamples (ffmpeg decodes Opus at 48 kHz). Files, not pipes: ffmpeg reads Ogg and
    mp3 from a pipe less completely.
    """
    assert FFMPEG, "ffmpeg is not installed"
    raw = ["-f", "s16le", "-ar", str(SAMPLE_RATE), "-ac", "1"] if fmt == "pcm" else []
    out = ["-ar", str(rate)] if rate else []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"cast.{fmt}"
        path.write_bytes(data)
        done = subprocess.run(
            [FFMPEG, "-nostdin", "-v", "error", *raw, "-i", str(path), *out, "-f", "f32le", "-"],
            capture_output=True,
            check=False,
            timeout=60,
        )
    return np.frombuffer(done.stdout, dtype=np.float32), done.stderr.decode(errors="replace")


def decode_timeline(fmt: str, data: bytes) -> np.ndarray:
    """The whole file decoded at SAMPLE_RATE with the codec's leading delay removed, so sample t
    lines up with PCM sample t."""
    samples, errors = ffmpeg_decode(fmt, data, rate=SAMPLE_RATE if fmt == "opus" else None)
    assert errors == "", errors
    return samples[LAYOUTS[fmt].delay_samples :]


def decode_records(fmt: str, records: Sequence[bytes], decode) -> list[np.ndarray]:
    """Each record decoded on its own through `standalone_record` and `decode(data) -> samples`,
    keeping its tail as the contract says; records without audio give nothing."""
    out = []
    prior = b""
    for record in records:
        one = standalone_record(fmt, prior, record)
        prior += record
        if one is None:
            continue
        samples = decode(one.data)
        assert one.keep is None or one.keep <= len(samples), (one.keep, len(samples))
        out.append(samples if one.keep is None else samples[len(samples) - one.keep :])
    return out
