"""Baseline: the raw engine looping with no server, no store and no scheduler.

Every chunk of every text synthesized back to back, each text planned as if alone: the
physical limit for throughput on this machine, and its real-time factor.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ._workload import SENTENCES, VOICE

__all__ = ["RawLoop", "raw_loop", "warm_rtf"]


@dataclass
class RawLoop:
    audio_s: float
    gen_s: float
    rtf: float
    """Compute seconds per audio second."""
    capacity: float
    """Audio seconds per wall second (1 / rtf)."""
    chunks: int
    chunk_time_s: float
    """The median chunk's synthesis time."""
    per_text_audio_s: list[float]


def warm_rtf(engine: Any, chunk_policy: Any, voice: str = VOICE) -> float:
    """Warm the engine up and return a first real-time factor (two sentences, timed)."""
    engine.warm_up(voice)
    begun, audio = time.perf_counter(), 0.0
    for chunk in engine.plan(" ".join(SENTENCES[:2]), voice, chunk_policy):
        audio += len(engine.synthesize(chunk, voice, 1.0).pcm) / engine.sample_rate
    return (time.perf_counter() - begun) / audio


def raw_loop(engine: Any, chunk_policy: Any, texts: Sequence[str], voice: str = VOICE) -> RawLoop:
    """Synthesize every chunk of `texts` in order; `chunk_policy` as the worker would plan."""
    per_text: list[float] = []
    times: list[float] = []
    gen = 0.0
    for text in texts:
        audio = 0.0
        for chunk in engine.plan(text, voice, chunk_policy):
            begun = time.perf_counter()
            synthesis = engine.synthesize(chunk, voice, 1.0, seed=chunk.index)
            took = time.perf_counter() - begun
            audio += len(synthesis.pcm) / engine.sample_rate
            gen += took
            times.append(took)
        per_text.append(audio)
    total = sum(per_text)
    return RawLoop(
        audio_s=total,
        gen_s=gen,
        rtf=gen / total,
        capacity=total / gen,
        chunks=len(times),
        chunk_time_s=statistics.median(times),
        per_text_audio_s=per_text,
    )
