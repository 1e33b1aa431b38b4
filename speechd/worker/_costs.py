"""What a chunk costs on this device, and what a cast's chunks are planned for.

`ChunkTimes` measures the device: a fixed price per call plus a price per second of audio,
refreshed from the latest chunks. `plan_timing` turns it into a cast's `PlanTiming` (its
share of the device, its chunks capped to a quantum of compute), and `chunk_quantum` is the
rule for that cap: the quantum while it protects someone, more while it protects nobody (see
`_policy` for who is protected).
"""

from __future__ import annotations

import bisect
import copy
import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from ._protocols import ChunkPolicyLike

__all__ = [
    "LONE_OVERHEAD",
    "MAX_LIFT",
    "SLOW_LIFT",
    "ChunkTimes",
    "Observation",
    "PlanTiming",
    "chunk_quantum",
    "plan_timing",
]

LONE_OVERHEAD = 0.05
"""With nobody to protect, a chunk on a device faster than real time grows until the fixed price
per chunk is at most this share of its compute (throughput within 5% of the engine's own,
chunk for chunk), and no further: a newcomer arriving during it waits for it."""

MAX_LIFT = 4.0
"""Nor past this many quanta: on a device just faster than real time with a high price per
call, the 5% rule alone would make chunks a newcomer waits many quanta for."""

SLOW_LIFT = 6.0
"""On a device slower than real time a lone cast's chunks may take this many quanta (see
`chunk_quantum`)."""

SLIP_CHUNKS = 3
"""How many of the latest chunks' slips (compute taken over compute predicted) the costs
follow (`ChunkTimes.slip`): a device that just ran slower than its window says is taken at
its word for the next chunks, before the window catches up."""

SLIP_NOISE = 1.05
"""A slip under this is the noise of one chunk's timing (a few % on a quiet 2-core CPU),
and counts as none: taken at its word it would price every chunk by its worst recent noise,
and admission, near its margin, would keep newcomers waiting for it."""

MAX_SLIP = 2.0
"""No slip counts for more than this: a chunk that took more than twice its prediction was
most likely stalled by something else for a moment (a neighbour's burst on a shared CPU);
if the device stays that slow, the curve's latest chunks say so within a few chunks."""

START_CASTS = 3
"""How many of the latest casts' starts the start excess is read from (`start_excess`): at
least two, and the least of them, so that one cast's slow start is never taken for the
device's habit."""

_BIN_SPAN = 1.5  # chunks whose audio lies within this factor are priced as one length
_BIN_LATEST = 4  # ... by the latest this many of them


@dataclass(frozen=True, slots=True)
class PlanTiming:
    """What a cast's chunks are planned for: each chunk of `a` audio seconds costs
    `overhead_s + rtf * a` (the cast's share of the device), and none holds more than
    `max_chunk_s` of audio (0: no cap). Kept in the cast's `start`, so that a later attempt
    plans the very same chunks. `share` is the share of the device it was planned for (not
    kept: a later attempt reads 1), what the cast's predictions scale the device's costs by."""

    rtf: float
    overhead_s: float = 0.0
    max_chunk_s: float = 0.0
    share: float = 1.0

    def apply(self, chunk_policy: ChunkPolicyLike) -> ChunkPolicyLike:
        """`chunk_policy` timed for this plan."""
        return chunk_policy.with_rtf(
            self.rtf, overhead_s=self.overhead_s, max_chunk_s=self.max_chunk_s
        )


def plan_timing(times: ChunkTimes, *, share: float = 1.0, quantum_s: float = 0.0) -> PlanTiming:
    """The timing to plan a cast for, from the device's measured costs: `share` times them
    (see `Policy.share`), chunks capped to cost at most `quantum_s` alone (0: no cap)."""
    overhead, slope = times.line
    cap = 0.0
    if quantum_s > 0:
        cap = times.audio_within(quantum_s)
        cap = 0.0 if math.isinf(cap) else max(cap, 0.01)  # a tiny cap: the planner's floor
    return PlanTiming(
        rtf=round(slope * share, 4),
        overhead_s=round(overhead * share, 4),
        max_chunk_s=round(cap, 3),
        share=share,
    )


def chunk_quantum(
    times: ChunkTimes, *, quantum_s: float, protects: bool, share: float = 1.0
) -> float:
    """The most compute one chunk of a cast planned for `share` of the device may take (0: no
    cap but the token caps): `quantum_s` while the chunk protects someone; otherwise long
    enough for the fixed price per chunk to be at most `LONE_OVERHEAD` of it (never less than
    the quantum, nor more than `MAX_LIFT` quanta), or `SLOW_LIFT` quanta where the cast
    cannot be made in real time.

    There nobody is admitted beside it, so the token caps would do for throughput alone; but a
    newcomer whose caller wants its first audio at once has its first chunk made ahead of its
    turn in line, after the chunk in flight (`_admission`): the longest chunk bounds its wait.
    Measured on the lazily planned simulation (`tests/worker/_slowsim.py`, rtf 1.3, texts cut
    at sentences), against the raw loop: `MAX_LIFT` (4) quanta, 10 s of compute, made 0.95x
    of a lone 40-sentence cast at 0.4 s per call, 0.92x at 0.7 s, and 0.94x of four
    6-sentence casts in line; 6 quanta (15 s) make 0.98x, 0.96x and 0.96x, as the token caps
    (about 20 s there) nearly do (0.99x, 0.98x, 0.97x). So 6: the newcomer waits at most
    about 15 s of compute for the chunk in flight, then its own first chunk."""
    if protects or quantum_s <= 0:
        return quantum_s
    overhead, slope = times.line
    if slope * share >= 1.0:
        return SLOW_LIFT * quantum_s
    return min(max(quantum_s, overhead / LONE_OVERHEAD), MAX_LIFT * quantum_s)


@dataclass(frozen=True, slots=True)
class Observation:
    """One chunk as the device made it: its length (phonemes and characters), its speed, its
    compute and the audio the model made. `starts`: the first chunk of a cast's playable
    sequence (see `ChunkTimes.start_excess`)."""

    units: int
    chars: int
    speed: float
    gen_s: float
    audio_s: float
    starts: bool = False


class ChunkTimes:
    """Recent chunk measurements, and predictions from them by chunk length.

    A chunk's length is its phoneme count (`units`). Its audio is predicted from a
    least-squares line `pad + per_unit * units` over the recent window (at speed 1, divided
    by the speed): a chunk's audio carries a fixed pad, so a long chunk is not priced at a
    short one's rate per phoneme (a window of short chunks put a slow device's long last
    chunk 15% long, and a listener's start hold with it).

    Its generation time is read off the recent chunks of about its length (`gen_s`): the
    mean cost of the latest few at each length, joined from one length to the next; below
    the shortest carried down the first step's slope, past the longest up the steeper of the
    last step's slope and the line's. One line
    `overhead + slope * audio` over every length (`line`, what a cast's chunks are planned
    for) is not the device's curve: Kokoro on torch costs 0.70 s per audio second at 1 s of
    audio, 0.46 at 3-7 s and more again past 20 s, so a line through the short chunks priced
    a 12 s chunk 16% low, and one through them all had a negative price per call (refused,
    then the mean rate, which priced a 1 s chunk 22% low; the line now falls back on the
    curve's shorter lengths). Until two lengths are known the
    line answers; until it is known (three chunks of different lengths), the mean rate; and
    before anything is measured, the priors.

    Every prediction is scaled by the device's `slip`: what the latest chunks took over what
    was predicted for them. The window is 48 chunks, so a device that slows (neighbours on a
    shared CPU, a cold call, a longer chunk than any measured) shows in it only chunks
    later, and a listener held back or admitted by the old figures stalls meanwhile.
    """

    def __init__(
        self,
        *,
        window: int = 48,
        prior_rtf: float = 1.0,
        prior_audio_per_unit: float = 0.075,
        prior_audio_per_char: float = 0.065,
    ) -> None:
        self._samples: deque[Observation] = deque(maxlen=window)
        self._prior_rtf = prior_rtf
        self._prior_per_unit = prior_audio_per_unit
        self._prior_per_char = prior_audio_per_char
        self._fit: tuple[float, float] | None = None
        self._audio_fit: tuple[float, float] | None = None
        self._curve: list[tuple[float, float]] | None = None
        self._slips: deque[float] = deque(maxlen=SLIP_CHUNKS)
        self._starts: deque[float] = deque(maxlen=START_CASTS)  # see `start_excess`
        self._start_slip: float | None = None  # a cast's first chunk's, until the next chunk
        self._last_start = False  # the latest slip is a cast's first chunk's

    def __len__(self) -> int:
        return len(self._samples)

    def observe(
        self,
        *,
        units: int,
        chars: int,
        speed: float,
        gen_s: float,
        audio_s: float,
        starts: bool = False,
    ) -> None:
        """Record one synthesized chunk: its length, speed, compute time and audio (and, once
        three chunks are known, how far it slipped from its prediction)."""
        self.learn(Observation(units, chars, speed, gen_s, audio_s, starts))

    def learn(self, seen: Observation) -> None:
        """Record one synthesized chunk (see `observe`)."""
        slip = None
        if len(self._samples) >= 3 and self._within(seen.audio_s):
            predicted = self._gen_at(seen.audio_s)
            if predicted > 0:
                slip = min(seen.gen_s / predicted, MAX_SLIP)
                self._slips.append(slip)
        self._last_start = seen.starts and slip is not None
        if seen.starts:
            self._start_slip = slip
        elif self._start_slip is not None:
            if slip is not None:  # how much slower the cast's start ran than what followed
                self._starts.append(max(self._start_slip / max(slip, 1.0), 1.0))
            self._start_slip = None
        self._samples.append(seen)
        self._fit = self._audio_fit = self._curve = None

    def after(self, seen: Iterable[Observation]) -> ChunkTimes:
        """These costs as they will be once `seen` is learned too: a copy that learned it
        (this one is unchanged), for predictions that must already count chunks not yet fed
        to the device's costs."""
        twin = copy.copy(self)
        twin._samples = deque(self._samples, maxlen=self._samples.maxlen)
        twin._slips = deque(self._slips, maxlen=self._slips.maxlen)
        twin._starts = deque(self._starts, maxlen=self._starts.maxlen)
        for observation in seen:
            twin.learn(observation)
        return twin

    @property
    def slip(self) -> float:
        """How much slower the device runs now than the window predicts: the most compute
        any of the latest `SLIP_CHUNKS` chunks took over its prediction (a chunk that ran
        fast is noise to the next one, a slow one a warning), 1 under `SLIP_NOISE`."""
        slip = max(self._slips, default=1.0)
        return slip if slip >= SLIP_NOISE else 1.0

    @property
    def start_excess(self) -> float:
        """How much slower than what follows it a cast's first chunk runs on this device, as
        the latest `START_CASTS` casts showed (the least of them; 1 until two casts did): on a
        CPU shared with the api that took the request, a cast's start pays for more than its
        chunk, and that is the cast's start, not the device's pace."""
        if len(self._starts) < 2:
            return 1.0
        return min(self._starts)

    def at_start(self) -> ChunkTimes:
        """These costs for the rest of a cast whose first chunk was the latest learned: that
        chunk's slip less the `start_excess` the device's casts have shown (so a device whose
        every cast starts slow holds no listener for it), a slip beyond it counted in full."""
        twin = self.after(())
        excess = self.start_excess
        if self._last_start and excess > 1.0 and twin._slips:
            twin._slips[-1] = max(twin._slips[-1] / excess, 1.0)
        return twin

    @property
    def rtf(self) -> float:
        """Compute seconds per audio second over the recent window (times the `slip`)."""
        return self.slip * self._mean_rate()

    def _mean_rate(self) -> float:
        audio = sum(s.audio_s for s in self._samples)
        if audio <= 0:
            return self._prior_rtf
        return sum(s.gen_s for s in self._samples) / audio

    def audio_s(self, units: int, speed: float) -> float:
        """Predicted audio of a chunk of `units` phonemes at `speed`."""
        if self._audio_fit is None:
            self._audio_fit = self._audio_line()
        pad, per_unit = self._audio_fit
        return (pad + units * per_unit) / speed

    def audio_for_chars(self, chars: int, speed: float) -> float:
        """Predicted audio of a whole text of `chars` characters at `speed`."""
        chars_total = sum(s.chars for s in self._samples)
        if chars_total > 0:
            per_char = sum(s.audio_s * s.speed for s in self._samples) / chars_total
        else:
            per_char = self._prior_per_char
        return chars * per_char / speed

    @property
    def line(self) -> tuple[float, float]:
        """(overhead, slope): a chunk of `a` audio seconds costs about `overhead + slope * a`
        compute seconds, one line over every length (times the `slip`): what a cast's chunks
        are planned for. `gen_s` follows the device's curve."""
        if self._fit is None:
            self._fit = self._line()
        overhead, slope = self._fit
        slip = self.slip
        return overhead * slip, slope * slip

    def gen_s(self, audio_s: float) -> float:
        """Predicted compute time of a chunk that makes `audio_s` seconds of audio: what the
        recent chunks of about that length took (see the class docstring), times the
        `slip`."""
        return self.slip * self._gen_at(audio_s)

    def audio_within(self, gen_s: float) -> float:
        """The most audio a chunk may make for its compute to take at most `gen_s`."""
        if gen_s < self.gen_s(0.0):
            return 0.0
        high = 1.0
        while self.gen_s(high) <= gen_s:
            high *= 2
            if high > 1e6:
                return math.inf
        low = 0.0
        for _ in range(40):
            middle = (low + high) / 2
            if self.gen_s(middle) <= gen_s:
                low = middle
            else:
                high = middle
        return low

    def _gen_at(self, audio_s: float) -> float:
        """The compute of a chunk of `audio_s` on the measured curve, before the slip."""
        if self._curve is None:
            self._curve = self._curve_points()
        points = self._curve
        overhead, slope = self._fit if self._fit is not None else self._refit()
        if len(points) < 2:
            return overhead + slope * audio_s
        xs = [x for x, _ in points]
        i = bisect.bisect_left(xs, audio_s)
        if 0 < i < len(points):
            (x0, y0), (x1, y1) = points[i - 1], points[i]
            return y0 + (y1 - y0) * (audio_s - x0) / (x1 - x0)
        if i == 0:  # below the shortest: never below nothing, never steeper than its rate
            (x0, y0), (x1, y1) = points[0], points[1]
            step = min((y1 - y0) / (x1 - x0), y0 / x0 if x0 > 0 else math.inf)
            return max(y0 - step * (x0 - audio_s), 0.0)
        (x0, y0), (x1, y1) = points[-2], points[-1]  # past the longest: the steeper slope
        step = max((y1 - y0) / (x1 - x0), slope, 0.0)
        return y1 + step * (audio_s - x1)

    def _within(self, audio_s: float) -> bool:
        """Whether a chunk of `audio_s` lies among the lengths measured (its prediction read
        off the curve, not carried past it: a slip there is the device's, not the curve's)."""
        if self._curve is None:
            self._curve = self._curve_points()
        points = self._curve
        if len(points) < 2:
            return False
        return points[0][0] / _BIN_SPAN <= audio_s <= points[-1][0] * _BIN_SPAN

    def _refit(self) -> tuple[float, float]:
        self._fit = self._line()
        return self._fit

    def _curve_points(self) -> list[tuple[float, float]]:
        """(audio, compute) of the recent chunks by length: among the chunks whose audio
        lies within `_BIN_SPAN` of each other, the means of the latest `_BIN_LATEST` (a length
        measured again is priced as the device runs now), from the shortest up, the compute
        never falling from one length to the next."""
        latest = [(n, s) for n, s in enumerate(self._samples) if s.audio_s > 0]
        bins: list[list[tuple[int, Observation]]] = []
        for n, sample in sorted(latest, key=lambda item: item[1].audio_s):
            if bins and sample.audio_s <= bins[-1][0][1].audio_s * _BIN_SPAN:
                bins[-1].append((n, sample))
            else:
                bins.append([(n, sample)])
        points: list[tuple[float, float]] = []
        for members in bins:
            group = [s for _, s in sorted(members, key=lambda item: item[0])[-_BIN_LATEST:]]
            x = sum(s.audio_s for s in group) / len(group)
            y = sum(s.gen_s for s in group) / len(group)
            points.append((x, max(y, points[-1][1]) if points else y))
        return points

    def _audio_line(self) -> tuple[float, float]:
        """(pad, per unit) at speed 1: the fit, or (0, the mean audio per unit)."""
        samples = self._samples
        units_total = sum(s.units for s in samples)
        if units_total <= 0:
            return 0.0, self._prior_per_unit
        mean = sum(s.audio_s * s.speed for s in samples) / units_total
        fit = _fit([(s.units, s.audio_s * s.speed) for s in samples])
        return fit if fit is not None else (0.0, mean)

    def _line(self) -> tuple[float, float]:
        """The least-squares line through the recent chunks; where that is no price (a device
        whose rate climbs again at long chunks gives a negative price per call), the line
        through the curve's lengths, the longest dropped until it is one; else the mean."""
        fit = _fit([(s.audio_s, s.gen_s) for s in self._samples])
        if fit is not None:
            return fit
        if self._curve is None:
            self._curve = self._curve_points()
        points = list(self._curve)
        while len(points) >= 3:
            fit = _fit(points)
            if fit is not None:
                return fit
            points.pop()
        return 0.0, self._mean_rate()


def _fit(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    """(intercept, slope) of the least-squares line through `points`; None unless there are
    three or more, of different x, and the line is a price: a positive slope and an
    intercept of at least 0."""
    n = len(points)
    if n < 3:
        return None
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var = sum((x - mean_x) ** 2 for x, _ in points)
    if var <= 1e-9 * max(mean_x * mean_x, 1e-9) * n:
        return None
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / var
    intercept = mean_y - slope * mean_x
    if slope <= 0 or intercept < 0 or not math.isfinite(slope):
        return None
    return intercept, slope
