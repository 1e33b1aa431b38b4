"""Scheduling policy: which cast gets the next chunk, when to sleep, whom to admit.

Pure objects in the manner of vLLM's scheduler: fed the active casts (as `ActiveCast`s with their
predictions already made), the current time and the measured real-time factor, they return a
decision and never do I/O. Times are seconds on one monotonic clock.

Each cast is seen on its listeners' clock: `first_audio_s` is when a listener who started at
the first audio of the cast's playable sequence (kept across attempts: the first durable
audio record's timestamp) would have started, moved on by the times it waited at the live
edge; `audio_s` is all the audio of that sequence. So a cast whose worker died and came back
is behind by the time it waited (urgent), never "ahead" by its re-used audio.

The unit of fairness is one chunk. `DeadlinePolicy`:

* **Earliest deadline next.** A cast's listener runs dry at `first_audio + audio appended`
  (its *lead* is that minus now); the cast whose listener runs dry first gets the next chunk
  (earliest deadline first: for one chunk each, the order that misses the fewest deadlines).
* **Newcomers first.** A cast with no audio yet in its playable sequence is the most urgent of
  all (its first audio is its deadline; among several, the earliest in line), unless making
  its first chunk now would cost a listener a stall it would not otherwise hear: then the
  listener whose deadline is first goes first, and the newcomer after. The listeners
  predicted to play through (each one's own slack, see below, is not negative) must keep the
  device's slack over them at least the newcomer's chunk, every chunk they still need
  counted, so a listener held back just long enough to play through keeps its play-through;
  those that stall anyway (a device slower than real time, first audio at once) must run dry
  no sooner at their next chunk than they would (`_late`). A newcomer may be a cast still
  waiting in line whose creator wants its first audio at once (`_admission`).
* **Sleep when comfortably ahead.** When the device's slack is `comfortable_lead_s` or more,
  and no job waits for room, sleep until it drops to that (at most `max_sleep_s`; a new job
  wakes the worker at once), instead of racing one cast to its end; never while a listener's
  chunks take longer to make than to play (the device cannot keep up with it: the margin of
  its start hold is not time to sleep away, and its deficit grows past the chunks the policy
  is shown). The slack is the least,
  over every chunk any listener still needs in deadline order, of its deadline minus the
  work due by then (Jackson's rule again): a listener whose start is held back leads by a lot
  early on, yet has no time to spare at its last chunk, so the worker never sleeps it into a
  stall.
* **Admission by capacity.** Admit one more cast only while the measured capacity still covers
  every admitted listener and the newcomer in real time with a margin. Each chunk a listener
  still needs is a job with a deadline (the moment playback reaches it: its lead, plus the
  audio of the chunks before it) and a predicted generation time times `1 + margin`; the
  newcomer, whose chunks are not planned yet, needs `rtf * (1 + margin)` compute seconds per
  second of its audio from now on. Admit iff, in deadline order, the work due by every
  deadline fits before it (Jackson's rule for one machine). On a small box two listeners who
  play smoothly beat four who all stutter. A cast with no audio yet has its first chunk due
  when it can be made, so one by one a newcomer waits in line until the one before it has
  its first audio; where batches save (`together`, `BatchCosts.together`) the newcomers'
  first chunks are priced as one batch made first, and they are let in to share it.
* **Plans for the casts it shares the device with.** A newcomer's chunks are planned
  (progressive chunking) for `n` times the measured cost per chunk (`share`), n counting itself
  and each active listener weighted by the part of the newcomer's life that listener still
  needs audio in (the same demand): a listener far enough ahead does not count against a short
  newcomer.
* **A quantum, when it protects someone.** A chunk cannot be interrupted, so the longest
  chunk is the longest a newcomer waits for the device: while another cast is active, or one
  waits in line that could be admitted before this one ends (`protects`), every chunk is
  planned to cost at most `quantum_s` of compute alone (`plan_timing`). When nobody is
  protected, chunks grow past it (`chunk_quantum`): as far as it takes for the fixed price per
  chunk to be at most `LONE_OVERHEAD` of a chunk's compute (at most `MAX_LIFT` quanta), and
  on a device that cannot keep the cast in real time (where nobody is admitted beside it
  anyway) to `SLOW_LIFT` quanta: a newcomer wanting its first audio at once waits for no
  more than that. A lone long cast then runs at close to the engine's own speed. The rule
  is per chunk: the worker asks it for every cast before each planning slice
  (`Admission.retime`), so a newcomer's arrival (in line or admitted) brings the quantum back
  for the chunks not cut yet (`Planner.retime`; the one or two already cut ahead stay as they
  are), and its end lifts it again. On a fast device the token caps bind first.

* **Background work last.** A background cast (a book's chapter nobody listens to yet,
  `ActiveCast.background`) is the lowest class: every rule above sees only the others (the
  listeners' casts), and a background cast gets a chunk only when their decision is to
  sleep or to idle, and only while its chunk costs no listener a stall it would not
  otherwise hear (`_room`, as for a newcomer). So it takes the device's spare time and
  nothing else: it never counts against a listener's admission, share or sleep, and the
  oldest background cast goes first (a book's chapters in order). Its chunks always keep to
  the quantum (`protects`), so a newcomer waits at most one quantum behind one.

`FifoPolicy` is the baseline: one cast at a time, each finished before the next starts (so
the quantum protects nobody there); background casts after every other.

What a chunk costs on this device (`ChunkTimes`) and what a cast's chunks are planned for
(`PlanTiming`, `chunk_quantum`) are in `_costs`; how long a listener's start is held back
when its cast cannot be made in real time is worked out from the plan in `_hold`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "COMFORTABLE_LEAD_S",
    "QUANTUM_S",
    "ActiveCast",
    "Candidate",
    "DeadlinePolicy",
    "Decision",
    "FifoPolicy",
    "Idle",
    "Policy",
    "Run",
    "Sleep",
    "make_policy",
]


COMFORTABLE_LEAD_S = 30.0
"""Past this lead (plus its next chunk) a listener needs nothing for a while: with every one
that far ahead the worker sleeps. Pacing keeps the device free for a newcomer, but every
second slept is one the last cast of a burst ends later (and a download waits): it only pays
once the quantum no longer bounds a newcomer's wait, far ahead of any listener."""

QUANTUM_S = 2.5
"""The longest a chunk may compute alone (about one sentence on a 2-core CPU; on a GPU the
token caps bind long before): with the newcomer's own first chunk, the longest wait for
first audio."""


@dataclass(frozen=True, slots=True)
class ActiveCast:
    """An active cast as the policy sees it."""

    id: str
    order: int  # its place in line (the job's offset); lower came first
    first_audio_s: float | None  # its listeners' clock origin (see above); None: no audio yet
    audio_s: float  # seconds of audio in its playable sequence
    chunks: tuple[tuple[float, float], ...]  # (audio, generation) predicted per chunk left
    background: bool = False  # made with spare time only (nobody listens to it yet)

    @property
    def next_gen_s(self) -> float:
        """Predicted generation time of its next chunk."""
        return self.chunks[0][1]

    @property
    def remaining_audio_s(self) -> float:
        """Predicted audio still to generate, next chunk included."""
        return sum(audio for audio, _ in self.chunks)

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

    def choose(self, now: float, casts: Sequence[ActiveCast], *, starved: bool = False) -> Decision:
        """The next step. `starved`: a cast waits in line for capacity (do not sleep then)."""
        ...

    def admit(
        self,
        now: float,
        casts: Sequence[ActiveCast],
        candidate: Candidate,
        *,
        rtf: float,
        together: Callable[[int], float] | None = None,
    ) -> bool:
        """Whether `candidate` may join the active `casts` now. `together`: what each of n
        first chunks costs made in one batch against alone (`BatchCosts.together`; None:
        chunks are made one by one)."""
        ...

    def share(self, now: float, casts: Sequence[ActiveCast], candidate: Candidate) -> float:
        """How many casts `candidate` shares the device with (itself included): its chunks are
        planned for that many times the device's cost per chunk."""
        ...

    def protects(
        self,
        now: float,
        casts: Sequence[ActiveCast],
        cast_id: str,
        candidate: Candidate | None,
        *,
        rtf: float,
    ) -> bool:
        """Whether the next chunk of active cast `cast_id` must keep to the quantum: someone
        would wait for it (`candidate`: the first cast waiting in line, if any)."""
        ...


class DeadlinePolicy:
    """Newcomers first, then earliest deadline; sleep when all are ahead; admit by capacity."""

    name = "deadline"

    def __init__(
        self,
        *,
        comfortable_lead_s: float = COMFORTABLE_LEAD_S,
        margin: float = 0.25,
        max_sleep_s: float = 1.0,
        min_sleep_s: float = 0.02,
    ) -> None:
        self.comfortable_lead_s = comfortable_lead_s
        self.margin = margin
        self.max_sleep_s = max_sleep_s
        self.min_sleep_s = min_sleep_s

    def choose(self, now: float, casts: Sequence[ActiveCast], *, starved: bool = False) -> Decision:
        decision = self._choose(now, _foreground(casts), starved=starved)
        if isinstance(decision, Run):
            return decision
        spare = [c for c in casts if c.background]
        if not spare:
            return decision
        oldest = min(spare, key=lambda c: c.order)
        listeners = [c for c in casts if not c.background and c.first_audio_s is not None]
        # Only the time the listeners would sleep or idle through, and only a chunk that
        # costs none of them a stall (a newcomer's chunk, had one come, went first above).
        if listeners and not _room(now, oldest.next_gen_s, listeners):
            return decision
        return Run(oldest.id)

    def _choose(self, now: float, casts: Sequence[ActiveCast], *, starved: bool) -> Decision:
        if not casts:
            return Idle()
        listeners = sorted(
            (c for c in casts if c.first_audio_s is not None), key=lambda c: (_dry(c), c.order)
        )
        fresh = [c for c in casts if c.first_audio_s is None]
        if fresh:
            newcomer = min(fresh, key=lambda c: c.order)
            # First audio is the most urgent deadline, unless making it now would cost a
            # listener a stall it would not otherwise hear: then that listener's chunk first.
            if listeners and not _room(now, newcomer.next_gen_s, listeners):
                return Run(listeners[0].id)
            return Run(newcomer.id)
        spare = _slack(now, listeners) - self.comfortable_lead_s
        if spare >= 0 and not starved and not any(map(_slower_than_real_time, listeners)):
            return Sleep(min(max(spare, self.min_sleep_s), self.max_sleep_s))
        return Run(listeners[0].id)

    def admit(
        self,
        now: float,
        casts: Sequence[ActiveCast],
        candidate: Candidate,
        *,
        rtf: float,
        together: Callable[[int], float] | None = None,
    ) -> bool:
        casts = _foreground(casts)  # a background cast takes nobody's room
        if not casts:
            return True
        # Every chunk still to make is a job due when its listener reaches it: a listener
        # with lead L needs its next chunk by L, the one after by L + that chunk's audio, and
        # so on. The newcomer's chunks are not planned yet: it needs `rtf` compute seconds
        # per second of its audio, from now on.
        cost = 1.0 + self.margin
        # Where batches save (`together`), the first chunks of the casts with no audio yet
        # are made together, first (newcomers go first, and ride in one batch: `fill_batch`)
        # at a batch's price: no listener hears them late, and their own listeners start
        # when that batch lands. One by one, each such chunk is due when it can be made, so
        # a newcomer waits in line until the one before it has its first audio. A
        # listener's later chunks are priced alone either way: batches of them vary in
        # make-up (padding, part-full) too much to promise a listener (priced at what the
        # batches saved lately: 38 stalls in 210 simulated loads, against none).
        fresh = [c for c in casts if c.first_audio_s is None]
        price = together(len(fresh) + 1) if together is not None and fresh else 1.0
        first = 0.0  # the newcomers' first chunks, when made together
        jobs: list[tuple[float, float]] = []
        after: list[tuple[float, float]] = []  # their later chunks, due from that batch on
        for cast in casts:
            mine = _chunk_jobs(now, cast, cost)
            if price < 1.0 and cast.first_audio_s is None:
                first += mine[0][1] * price
                after.extend((due - mine[0][0], gen) for due, gen in mine[1:])
            else:
                jobs.extend(mine)
        jobs = sorted([*jobs, *((first + due, gen) for due, gen in after)])
        fluid = rtf * cost
        life = max(candidate.audio_s, 0.0)
        # Jackson's rule: the jobs can all be made in time, in deadline order, iff at every
        # deadline the work due by then fits before it; the newcomer's share counts too.
        work = first
        for due, gen in jobs:
            work += gen
            if work + fluid * min(max(due, 0.0), life) > due:
                return False
        due_by_end = first + sum(gen for due, gen in jobs if due <= life)
        return due_by_end + fluid * life <= life

    def share(self, now: float, casts: Sequence[ActiveCast], candidate: Candidate) -> float:
        """Itself, plus each active listener weighted by the part of `candidate`'s life it
        still needs audio in (a listener far enough ahead needs none of it)."""
        life = max(candidate.audio_s, 1e-6)
        return 1.0 + _need(_demands(now, _foreground(casts)), life) / life

    def protects(
        self,
        now: float,
        casts: Sequence[ActiveCast],
        cast_id: str,
        candidate: Candidate | None,
        *,
        rtf: float,
    ) -> bool:
        """Another active cast, or a candidate that the admission rule lets in before one of
        this cast's chunks (as predicted: its chunks made back to back, the next
        `_PROTECT_STEPS` of them; one let in later than that is looked at again as the cast
        goes on). Only on a device that may admit a cast beside another at all. A
        background cast always keeps to it: a newcomer may come at any time, and it never
        waits longer than one quantum behind a book."""
        if any(c.id == cast_id and c.background for c in casts):
            return True
        casts = _foreground(casts)  # a background cast waits anyway: it protects nobody
        if any(c.id != cast_id for c in casts):
            return True
        if candidate is None:
            return False
        if rtf * (1.0 + self.margin) >= 1.0:
            return False  # the newcomer alone needs more than the device: never beside a cast
        mine = [c for c in casts if c.id == cast_id]
        if not mine:
            return True
        cast = mine[0]
        t = now
        for _ in range(min(len(cast.chunks), _PROTECT_STEPS)):
            if self.admit(t, [cast], candidate, rtf=rtf):
                return True
            t += cast.next_gen_s
            cast = _after_chunk(cast, t)
        return False


def _foreground(casts: Sequence[ActiveCast]) -> Sequence[ActiveCast]:
    """The casts but the background ones: what every listener's rule sees."""
    if not any(c.background for c in casts):
        return casts
    return [c for c in casts if not c.background]


#: How many of a lone cast's chunks `DeadlinePolicy.protects` looks ahead.
_PROTECT_STEPS = 16


def _after_chunk(cast: ActiveCast, t: float) -> ActiveCast:
    """`cast` once its next chunk landed at `t`."""
    audio = cast.chunks[0][0]
    first = cast.first_audio_s if cast.first_audio_s is not None else t
    return ActiveCast(
        cast.id, cast.order, first, cast.audio_s + audio, cast.chunks[1:], cast.background
    )


def _slack(now: float, listeners: Sequence[ActiveCast]) -> float:
    """The device's slack: over every chunk the listeners still need, in deadline order, the
    least of (its deadline - now - the work due by then)."""
    jobs = sorted((due, gen) for cast in listeners for due, gen in _chunk_jobs(now, cast, 1.0))
    work = 0.0
    least = math.inf
    for due, gen in jobs:
        work += gen
        least = min(least, due - work)
    return least


def _room(now: float, gen: float, listeners: Sequence[ActiveCast]) -> bool:
    """Whether `gen` seconds of other work first costs none of `listeners` a stall it would
    not otherwise hear: those predicted to play through keep a slack of `gen` (Jackson's
    rule, every chunk they still need), and the others run dry no sooner at their next
    chunk."""
    smooth = [c for c in listeners if _slack(now, [c]) >= 0]
    if smooth and _slack(now, smooth) < gen:
        return False
    rest = [c for c in listeners if c not in smooth]
    return _late(now + gen, rest) <= _late(now, rest)


def _chunk_jobs(now: float, cast: ActiveCast, cost: float) -> list[tuple[float, float]]:
    """(due in seconds from now, generation time * cost) of each chunk the cast has left. A
    cast with no audio yet has its first chunk due when it can be made (its first audio) and
    the rest from then on."""
    lead = cast.lead(now)
    due = lead if lead is not None else cast.next_gen_s * cost
    out = []
    for audio, gen in cast.chunks:
        out.append((due, gen * cost))
        due += audio
    return out


def _slower_than_real_time(cast: ActiveCast) -> bool:
    """Whether the chunks the cast is shown take longer to make than to play: the device
    cannot keep up with it, so its listener's start is held back (`_hold`) or it will stall.
    Its slack over those chunks (a long cast is shown only its next ones) says nothing of the
    chunks after them, where the deficit grows: sleeping it spends the margin its hold was
    given (a 200,000-character cast slept through most of its hour-long hold after its first
    chunk, so a download waited that long and the listener lost the margin)."""
    return sum(gen for _, gen in cast.chunks) >= sum(audio for audio, _ in cast.chunks)


def _dry(cast: ActiveCast) -> float:
    """When the cast's listener runs out of audio."""
    assert cast.first_audio_s is not None
    return cast.first_audio_s + cast.audio_s


def _late(start: float, listeners: Sequence[ActiveCast]) -> int:
    """How many of `listeners` (in order) run dry if each gets its next chunk from `start`."""
    late = 0
    for cast in listeners:
        start += cast.next_gen_s
        if start > _dry(cast):
            late += 1
    return late


def _demands(now: float, casts: Sequence[ActiveCast]) -> list[tuple[float, float]]:
    """(lead, remaining audio) per listener; one with no audio yet starts about now."""
    return [(c.lead(now) or 0.0, max(c.remaining_audio_s, 0.0)) for c in casts]


def _need(demands: Sequence[tuple[float, float]], horizon: float) -> float:
    """Audio seconds the listeners must be given by `horizon` seconds from now."""
    return sum(min(max(horizon - lead, 0.0), remaining) for lead, remaining in demands)


class FifoPolicy:
    """The baseline: finish one cast, then start the next."""

    name = "fifo"

    def choose(self, now: float, casts: Sequence[ActiveCast], *, starved: bool = False) -> Decision:
        if not casts:
            return Idle()
        return Run(min(casts, key=lambda c: (c.background, c.order)).id)

    def admit(
        self,
        now: float,
        casts: Sequence[ActiveCast],
        candidate: Candidate,
        *,
        rtf: float,
        together: Callable[[int], float] | None = None,
    ) -> bool:
        return not _foreground(casts)

    def share(self, now: float, casts: Sequence[ActiveCast], candidate: Candidate) -> float:
        return 1.0  # a cast has the device to itself

    def protects(
        self,
        now: float,
        casts: Sequence[ActiveCast],
        cast_id: str,
        candidate: Candidate | None,
        *,
        rtf: float,
    ) -> bool:
        return False  # whoever waits, waits for the whole cast


def make_policy(name: str, *, comfortable_lead_s: float = COMFORTABLE_LEAD_S) -> Policy:
    """The policy called `name` ("deadline" or "fifo")."""
    if name == "deadline":
        return DeadlinePolicy(comfortable_lead_s=comfortable_lead_s)
    if name == "fifo":
        return FifoPolicy()
    raise ValueError(f"unknown scheduling policy {name!r} (deadline, fifo)")
