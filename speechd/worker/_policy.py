"""Scheduling policy: which cast gets the next chunk, when to sleep, whom to admit.

Pure objects in the manner of vLLM's scheduler: fed the active casts (as `CastView`s with their
predictions already made), the current time and the measured real-time factor, they return a
decision and never do I/O. Times are seconds on one monotonic clock.

The unit of fairness is one chunk. `DeadlinePolicy`:

* **Newcomers first.** A cast with no audio yet in its current attempt is the most urgent of
  all (its first audio is its deadline); among several, the earliest in line.
* **Least slack next.** A cast's listener runs dry at `first_audio + audio appended` (its
  *lead* is that minus now). Its slack is that deadline minus now minus the predicted
  generation time of its next chunk; the cast whose deadline would be missed first goes next.
* **Sleep when comfortably ahead.** When every active cast's slack is `comfortable_lead_s` or
  more (it leads by that plus its next chunk's predicted time), and no job waits for room,
  sleep until the first of them drops to that (at most `max_sleep_s`; a new job wakes the
  worker at once), instead of racing one cast to its end.
* **Admission by capacity.** Admit one more cast only while the measured capacity still covers
  every admitted listener and the newcomer in real time with a margin: for every horizon h,
  the compute needed to keep each listener playing until now+h, times `1 + margin`, fits in h.
  Listener i with lead L and R seconds of audio still to make needs `clamp(h - L, 0, R)`
  seconds of audio by then, costing `rtf` compute seconds per audio second (a fluid
  demand-bound test, checked where it can first fail: at h = 0 and at each h = L + R).
  On a small box two listeners who play smoothly beat four who all stutter.

`FifoPolicy` is the baseline: one cast at a time, each finished before the next starts.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "Candidate",
    "CastView",
    "ChunkTimes",
    "DeadlinePolicy",
    "Decision",
    "FifoPolicy",
    "Idle",
    "Policy",
    "Run",
    "Sleep",
    "make_policy",
]


@dataclass(frozen=True, slots=True)
class CastView:
    """An active cast as the policy sees it."""

    id: str
    order: int  # its place in line (the job's offset); lower came first
    first_audio_s: float | None  # when its current attempt's first audio landed; None: none yet
    audio_s: float  # seconds of audio appended in its current attempt
    next_gen_s: float  # predicted generation time of its next chunk
    remaining_audio_s: float  # predicted audio still to generate, next chunk included

    def lead(self, now: float) -> float | None:
        """Seconds of audio its listener has buffered (negative: running dry), or None."""
        if self.first_audio_s is None:
            return None
        return self.audio_s - (now - self.first_audio_s)


@dataclass(frozen=True, slots=True)
class Candidate:
    """The first cast waiting in line."""

    id: str
    audio_s: float  # predicted audio of the whole cast


@dataclass(frozen=True, slots=True)
class Run:
    """Synthesize exactly one chunk of this cast."""

    cast_id: str


@dataclass(frozen=True, slots=True)
class Sleep:
    """Everyone is comfortably ahead: wait this long (or until a job arrives)."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Idle:
    """Nothing to do until a job arrives."""


Decision = Run | Sleep | Idle


class Policy(Protocol):
    name: str

    def choose(self, now: float, casts: Sequence[CastView], *, starved: bool = False) -> Decision:
        """The next step. `starved`: a cast waits in line for capacity (do not sleep then)."""
        ...

    def admit(
        self, now: float, casts: Sequence[CastView], candidate: Candidate, *, rtf: float
    ) -> bool:
        """Whether `candidate` may join the active `casts` now."""
        ...


class DeadlinePolicy:
    """Newcomers first, then least slack; sleep when all are ahead; admit by capacity."""

    name = "deadline"

    def __init__(
        self,
        *,
        comfortable_lead_s: float = 8.0,
        margin: float = 0.25,
        max_sleep_s: float = 1.0,
        min_sleep_s: float = 0.02,
    ) -> None:
        self.comfortable_lead_s = comfortable_lead_s
        self.margin = margin
        self.max_sleep_s = max_sleep_s
        self.min_sleep_s = min_sleep_s

    def choose(self, now: float, casts: Sequence[CastView], *, starved: bool = False) -> Decision:
        if not casts:
            return Idle()
        fresh = [c for c in casts if c.first_audio_s is None]
        if fresh:
            return Run(min(fresh, key=lambda c: c.order).id)

        def slack(c: CastView) -> float:
            assert c.first_audio_s is not None
            return c.first_audio_s + c.audio_s - now - c.next_gen_s

        spare = min(slack(c) for c in casts) - self.comfortable_lead_s
        if spare >= 0 and not starved:
            return Sleep(min(max(spare, self.min_sleep_s), self.max_sleep_s))
        return Run(min(casts, key=lambda c: (slack(c), c.order)).id)

    def admit(
        self, now: float, casts: Sequence[CastView], candidate: Candidate, *, rtf: float
    ) -> bool:
        if not casts:
            return True
        # (lead, remaining audio) per listener; one with no audio yet starts about now.
        demands = [(c.lead(now) or 0.0, max(c.remaining_audio_s, 0.0)) for c in casts]
        demands.append((0.0, max(candidate.audio_s, 0.0)))
        cost = rtf * (1.0 + self.margin)  # compute seconds per audio second, with the margin
        # Need(h) is piecewise linear and bends down only at h = L + R, so the test can first
        # fail there, or at once (h = 0) if some listener is already dry.
        horizons = {0.0} | {lead + remaining for lead, remaining in demands}
        for horizon in horizons:
            if horizon < 0:
                continue
            need = sum(min(max(horizon - lead, 0.0), remaining) for lead, remaining in demands)
            if cost * need > horizon:
                return False
        return True


class FifoPolicy:
    """The baseline: finish one cast, then start the next."""

    name = "fifo"

    def choose(self, now: float, casts: Sequence[CastView], *, starved: bool = False) -> Decision:
        if not casts:
            return Idle()
        return Run(min(casts, key=lambda c: c.order).id)

    def admit(
        self, now: float, casts: Sequence[CastView], candidate: Candidate, *, rtf: float
    ) -> bool:
        return not casts


def make_policy(name: str, *, comfortable_lead_s: float = 8.0) -> Policy:
    """The policy called `name` ("deadline" or "fifo")."""
    if name == "deadline":
        return DeadlinePolicy(comfortable_lead_s=comfortable_lead_s)
    if name == "fifo":
        return FifoPolicy()
    raise ValueError(f"unknown scheduling policy {name!r} (deadline, fifo)")


@dataclass(frozen=True, slots=True)
class _Sample:
    units: int
    chars: int
    speed: float
    gen_s: float
    audio_s: float


class ChunkTimes:
    """Recent chunk measurements, and predictions from them by chunk length.

    A chunk's length is its phoneme count (`units`). Its audio is predicted from the recent
    audio per phoneme (at speed 1, divided by the speed), and its generation time from a
    least-squares line `overhead + slope * audio` over the recent window, so short chunks
    carry their fixed per-call cost. Until anything is measured, the priors answer.
    """

    def __init__(
        self,
        *,
        window: int = 48,
        prior_rtf: float = 1.0,
        prior_audio_per_unit: float = 0.075,
        prior_audio_per_char: float = 0.065,
    ) -> None:
        self._samples: deque[_Sample] = deque(maxlen=window)
        self._prior_rtf = prior_rtf
        self._prior_per_unit = prior_audio_per_unit
        self._prior_per_char = prior_audio_per_char
        self._fit: tuple[float, float] | None = None

    def __len__(self) -> int:
        return len(self._samples)

    def observe(
        self, *, units: int, chars: int, speed: float, gen_s: float, audio_s: float
    ) -> None:
        """Record one synthesized chunk: its length, speed, compute time and audio."""
        self._samples.append(_Sample(units, chars, speed, gen_s, audio_s))
        self._fit = None

    @property
    def rtf(self) -> float:
        """Compute seconds per audio second over the recent window."""
        audio = sum(s.audio_s for s in self._samples)
        if audio <= 0:
            return self._prior_rtf
        return sum(s.gen_s for s in self._samples) / audio

    def audio_s(self, units: int, speed: float) -> float:
        """Predicted audio of a chunk of `units` phonemes at `speed`."""
        units_total = sum(s.units for s in self._samples)
        if units_total > 0:
            per_unit = sum(s.audio_s * s.speed for s in self._samples) / units_total
        else:
            per_unit = self._prior_per_unit
        return units * per_unit / speed

    def audio_for_chars(self, chars: int, speed: float) -> float:
        """Predicted audio of a whole text of `chars` characters at `speed`."""
        chars_total = sum(s.chars for s in self._samples)
        if chars_total > 0:
            per_char = sum(s.audio_s * s.speed for s in self._samples) / chars_total
        else:
            per_char = self._prior_per_char
        return chars * per_char / speed

    def gen_s(self, audio_s: float) -> float:
        """Predicted compute time of a chunk that makes `audio_s` seconds of audio."""
        if self._fit is None:
            self._fit = self._line()
        overhead, slope = self._fit
        return overhead + slope * audio_s

    def _line(self) -> tuple[float, float]:
        rtf = self.rtf
        samples = self._samples
        if len(samples) < 3:
            return 0.0, rtf
        n = len(samples)
        mean_x = sum(s.audio_s for s in samples) / n
        mean_y = sum(s.gen_s for s in samples) / n
        var = sum((s.audio_s - mean_x) ** 2 for s in samples)
        if var <= 1e-9 * max(mean_x * mean_x, 1e-9) * n:
            return 0.0, rtf
        slope = sum((s.audio_s - mean_x) * (s.gen_s - mean_y) for s in samples) / var
        overhead = mean_y - slope * mean_x
        if slope <= 0 or overhead < 0 or not math.isfinite(slope):
            return 0.0, rtf
        return overhead, slope
