"""Encoder cost per second of audio, for every response format.

    python -m loadtest.bench_encoders [--seconds 60] [--repeat 3]

Encodes a speech-like 24 kHz signal the way the worker does (a short first chunk, then chunks
of a few seconds, an empty final chunk) and prints, per format: CPU milliseconds per audio
second and the resulting real-time multiple (best of --repeat runs, one thread), wall time,
output size per audio second, the cost of opening an encoder, and how much audio the records
hold back at a chunk boundary (what a listener receives only with the next record).
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from speechd.audio import FORMATS, LAYOUTS, SAMPLE_RATE, new_encoder, standalone_record


def speech_like(n: int) -> np.ndarray:
    """Voiced-speech-like: a gliding fundamental with harmonics, syllable-rate envelope, noise."""
    rng = np.random.default_rng(0)
    t = np.arange(n) / SAMPLE_RATE
    f0 = 150 + 60 * np.sin(2 * np.pi * 0.7 * t) + 30 * np.sin(2 * np.pi * 2.3 * t)
    phase = 2 * np.pi * np.cumsum(f0) / SAMPLE_RATE
    voiced = sum(np.sin(h * phase) / h for h in range(1, 12))
    envelope = 0.55 + 0.45 * np.sin(2 * np.pi * 4.0 * t) ** 2
    return np.clip(0.25 * voiced * envelope + 0.01 * rng.standard_normal(n), -1, 1).astype(
        np.float32
    )


def chunk_lengths(total: int) -> list[int]:
    """1.5 s first, then 3.5 and 6 s, then 8 s chunks (progressive chunking), then a flush."""
    plan = (1.5, 3.5, 6.0)
    out: list[int] = []
    pos = 0
    while pos < total:
        seconds = plan[len(out)] if len(out) < len(plan) else 8.0
        out.append(min(int(seconds * SAMPLE_RATE), total - pos))
        pos += out[-1]
    return [*out, 0]


def encode(fmt: str, pcm: np.ndarray, chunks: list[int]) -> tuple[list[bytes], float, float]:
    """(records, CPU seconds, wall seconds) of one cast."""
    cpu, wall = time.process_time(), time.perf_counter()
    encoder = new_encoder(fmt)
    records = []
    pos = 0
    for i, n in enumerate(chunks):
        records.append(encoder.encode(pcm[pos : pos + n], final=i == len(chunks) - 1))
        pos += n
    return records, time.process_time() - cpu, time.perf_counter() - wall


def held_back_ms(fmt: str, records: list[bytes], chunks: list[int]) -> float:
    """The most audio (ms) that a chunk's record leaves for the next one (decoded with ffmpeg)."""
    layout = LAYOUTS[fmt]
    worst = 0.0
    prior = b""
    decoded = 0
    fed = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "record"
        for record, n in zip(records[:-1], chunks[:-1], strict=True):
            fed += n
            one = standalone_record(fmt, prior, record)
            prior += record
            if one is not None:
                if one.keep is None:
                    path.write_bytes(one.data)
                    out = subprocess.run(
                        ["ffmpeg", "-v", "error", "-i", str(path), "-f", "f32le", "-"],
                        capture_output=True,
                        check=True,
                    ).stdout
                    decoded += len(out) // 4
                else:
                    decoded += one.keep
            have = decoded * SAMPLE_RATE / layout.decode_rate - layout.delay_samples
            worst = max(worst, (fed - have) / SAMPLE_RATE * 1000)
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="audio per cast")
    parser.add_argument("--repeat", type=int, default=3, help="runs per format (best is shown)")
    args = parser.parse_args()

    pcm = speech_like(int(args.seconds * SAMPLE_RATE))
    chunks = chunk_lengths(len(pcm))
    seconds = len(pcm) / SAMPLE_RATE
    print(
        f"speechd encoders: {seconds:.0f} s of 24 kHz mono speech-like audio in "
        f"{len(chunks) - 1} chunks + flush, best of {args.repeat}; "
        f"{platform.processor() or platform.machine()}, Python {platform.python_version()}"
    )
    header = (
        f"{'format':6} {'CPU ms/audio s':>14} {'x real time':>12} {'wall ms/s':>10} "
        f"{'bytes/audio s':>13} {'kbit/s':>7} {'open ms':>8} {'held back ms':>13}"
    )
    print(header)
    print("-" * len(header))
    for fmt in FORMATS:
        runs = [encode(fmt, pcm, chunks) for _ in range(args.repeat)]
        records = runs[0][0]
        cpu = min(r[1] for r in runs)
        wall = min(r[2] for r in runs)
        size = sum(len(r) for r in records)
        opened = time.perf_counter()
        for _ in range(20):
            new_encoder(fmt)
        open_ms = (time.perf_counter() - opened) / 20 * 1000
        kbps = size * 8 / seconds / 1000
        print(
            f"{fmt:6} {cpu / seconds * 1000:14.2f} {seconds / max(cpu, 1e-9):12.0f} "
            f"{wall / seconds * 1000:10.2f} {size / seconds:13.0f} {kbps:7.1f} "
            f"{open_ms:8.2f} {held_back_ms(fmt, records, chunks):13.0f}"
        )


if __name__ == "__main__":
    main()
