"""Baseline: the raw engine looping with no server, no store and no scheduler.

Every chunk of every text synthesized back to back, each text planned as the worker plans a
cast that has the device to itself: the physical limit for throughput on this machine with
the worker's chunks, and its real-time factor.
"""

from __future__ import annotations

import concurrent.futures
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from speechd.worker import QUANTUM_S, ChunkTimes, plan_timing, warm_up

from ._workload import VOICE

__all__ = ["RawLoop", "lone_cast_policy", "on_own_thread", "raw_loop"]

T = TypeVar("T")


def on_own_thread(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` on a thread of its own that ends with it: torch must not run on a thread
    that outlives its work beside the worker's engine thread (`speechd.worker._thread` says
    why). A raw loop left on the main thread made an in-process worker 13% slower on 2 cores."""
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="bench-engine") as pool:
        return pool.submit(fn, *args).result()


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
    longest_chunk_s: float
    per_text_audio_s: list[float]


def lone_cast_policy(engine: Any, chunk_policy: Any, voice: str = VOICE) -> Any:
    """Warm the engine up, measure its costs as a worker does, and return `chunk_policy` timed
    as the worker plans a cast that has the device to itself (its quantum included)."""
    times = ChunkTimes()
    warm_up(engine, chunk_policy, voice, times)
    return plan_timing(times, quantum_s=QUANTUM_S).apply(chunk_policy)


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
        longest_chunk_s=max(times),
        per_text_audio_s=per_text,
    )
