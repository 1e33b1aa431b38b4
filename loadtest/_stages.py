"""Where one chunk's synthesis time goes: the engine's stages timed from outside.

`StageClock` wraps the two halves a runtime runs (`speechd.engine._runtime`'s front and back,
and the host's noise draw) for as long as it is installed, so `Engine.synthesize` runs its
ordinary code and each call leaves a `Stages` record: the front (text encoders and durations),
the noise draw, the back (prosody and decoder), and the engine's own share around them (voice
style lookup, token mapping, trim, heap trim), plus how much audio the model made and how much
the trim kept. Benchmarks only: it patches private names for the duration of a `with`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["StageClock", "Stages", "fit_line"]


@dataclass
class Stages:
    front_s: float = 0.0
    noise_s: float = 0.0
    back_s: float = 0.0
    total_s: float = 0.0
    made_s: float = 0.0
    """Audio the model decoded (the silence the trim cuts included)."""
    kept_s: float = 0.0

    @property
    def engine_s(self) -> float:
        """What the engine adds around the runtime (style, tokens, trim, heap trim)."""
        return max(0.0, self.total_s - self.front_s - self.noise_s - self.back_s)


class _Timed:
    def __init__(self, stages: Any, record: Stages) -> None:
        self._stages = stages
        self._record = record

    def front(self, *args: Any) -> Any:
        began = time.perf_counter()
        try:
            return self._stages.front(*args)
        finally:
            self._record.front_s += time.perf_counter() - began

    def back(self, *args: Any) -> Any:
        began = time.perf_counter()
        try:
            return self._stages.back(*args)
        finally:
            self._record.back_s += time.perf_counter() - began


@dataclass
class StageClock:
    """Installed with `with clock.installed():`; `clock.measure(fn)` times one synthesis."""

    current: Stages = field(default_factory=Stages)

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        from speechd.engine import _onnx, _runtime, _torch

        two_stages = _runtime.infer_in_two_stages
        excitation = _runtime.excitation

        def timed_two_stages(stages: Any, *args: Any) -> Any:
            return two_stages(_Timed(stages, self.current), *args)

        def timed_excitation(*args: Any) -> Any:
            began = time.perf_counter()
            try:
                return excitation(*args)
            finally:
                self.current.noise_s += time.perf_counter() - began

        saved = (_torch.infer_in_two_stages, _onnx.infer_in_two_stages)
        _torch.infer_in_two_stages = _onnx.infer_in_two_stages = timed_two_stages
        _runtime.excitation = timed_excitation
        try:
            yield
        finally:
            _torch.infer_in_two_stages, _onnx.infer_in_two_stages = saved
            _runtime.excitation = excitation

    def measure(self, engine: Any, chunk: Any, voice: str, seed: int) -> Stages:
        from speechd.engine import SAMPLES_PER_FRAME

        self.current = record = Stages()
        began = time.perf_counter()
        synthesis = engine.synthesize(chunk, voice, 1.0, seed=seed)
        record.total_s = time.perf_counter() - began
        record.kept_s = synthesis.duration_s
        made = sum(synthesis.durations) * SAMPLES_PER_FRAME
        record.made_s = (made or len(synthesis.pcm)) / synthesis.sample_rate
        return record


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares y = a + b x: (a, b)."""
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    var = sum((x - mean_x) ** 2 for x in xs)
    if var == 0:
        return mean_y, 0.0
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / var
    return mean_y - slope * mean_x, slope
