"""An admitted cast as the worker holds it while it makes it, its listeners' clock, what one
go at its stream does to it (`Update`, applied by `Admitted.advance`), and the active casts
(`ActiveCasts`), which the loop owns."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from speechd.casts import playable_spans
from speechd.casts.schema import Eos, Recipe, RecordSpan, Start, cast_stream
from speechd.durable import (
    MAX_BATCH_BYTES,
    MAX_BATCH_RECORDS,
    MAX_BODY_BYTES,
    MAX_HEADER_BYTES,
    AppendRecord,
    Limits,
)

from ._continuation import Going, Resume
from ._costs import PlanTiming
from ._plan import CastPlan, Planned
from ._protocols import EncoderLike

__all__ = ["ActiveCasts", "Admitted", "JobRef", "Landed", "Update"]

# The contract's maxima (what the embedded store takes), for an `Admitted` made without limits.
_CONTRACT = Limits(MAX_BODY_BYTES + MAX_HEADER_BYTES, MAX_BATCH_RECORDS, MAX_BATCH_BYTES)


@dataclass(frozen=True, slots=True)
class JobRef:
    """A job read from `jobs`: its offset there, its cast, whether the request that
    appended it wants its first audio at once (`Job.at_once`), and whether it is background
    work and for which book (`Job.background`, `Job.book`)."""

    offset: int
    id: str
    at_once: bool = False
    background: bool = False
    book: str = ""


@dataclass(frozen=True, slots=True)
class Update:
    """What one go at a cast's stream does to the cast once its records are durable
    (`Admitted.advance`): a rendered chunk's (worked out by `_update.step_outcome`), a new
    attempt's `start` (`start`, and `going` where it goes back to a checkpoint or to the
    beginning), or the records that end a file whose last chunk did not.

    `batches` are its records in the store's own batches (each record checked against the
    store's limits), appended in turn, each conditional on the seq the worker expects."""

    batches: Sequence[Sequence[AppendRecord]]
    planned: Planned | None = None  # the chunk of the plan it is (the plan moves past it)
    made: int = 0  # audio records it appends
    samples: int = 0  # audio samples it adds to the playable sequence
    gen_s: float = 0.0  # compute it cost (as made, in its batch)
    resume: Resume | None = None  # the checkpoint its last record carries (None: none)
    hold_ms: int = 0  # the start hold its first record states (the sequence's first audio)
    held_ms: int = 0  # how long that holds its listeners back (0 where they play at once)
    eos: Eos | None = None  # its last record ends the cast
    start: Start | None = None  # a new attempt begins with these records
    going: Going | None = None  # ... and goes on from here (None: from where it stands)


@dataclass(frozen=True, slots=True)
class Landed:
    """Where an update's records landed: the first one's seq and timestamp (the store's
    clock), the seq after the last, and, on the worker's clock, when the last append was sent
    (what renews the lease) and when it was acknowledged."""

    start_seq: int
    first_ms: int
    next_seq: int
    sent: float
    at: float


@dataclass(eq=False)
class Admitted:
    """An admitted cast: its plan, its current attempt, and where its stream stands.

    The playable sequence is the `start.keep` records kept from earlier attempts and the
    `made` records this attempt appended since its `start` (at `start_seq`), so the next
    record's index (`i`) is `keep + made`.

    Its progress (the attempt and its `start_seq`, `next_seq`, `made`, `samples`, `gen_s`,
    `resume`, `origin_ms`, `origin_s`, the encoder, the plan and its position) is written by
    one method, `advance`, as each update's records become durable; the lease's renewal time
    `renewed` is also moved by a renewal in `leases/<id>` (`Ownership.renew`).

    The listeners' clock (`origin_s`, on the worker's monotonic clock): a listener who started
    playing at the sequence's first audio and waits at the live edge whenever it catches up
    would now be `now - origin_s` seconds in. It starts at the first durable audio record's
    timestamp plus the start hold it states (kept across attempts: a cast that waited on a
    restart is behind, so urgent), and moves on by each wait: when a chunk lands after the
    listener ran dry, the listener resumes then. A cast that cannot be made in real time holds
    its listeners back (`_hold`): their clock starts that long after the first audio.
    """

    job: JobRef
    recipe: Recipe
    plan: CastPlan
    timing: PlanTiming  # what its plan was made for (kept by later attempts)
    start: Start  # the current attempt's
    start_seq: int
    next_seq: int  # the seq this worker expects to append next
    encoder: EncoderLike
    samples: int = 0  # audio samples in the playable sequence so far
    gen_s: float = 0.0  # compute spent on the playable sequence (kept chunks included)
    origin_ms: int = 0  # the first playable record's timestamp (the writer's clock); 0: none
    origin_s: float | None = None  # the listeners' clock (see above); None: no audio yet
    resume: Resume | None = None  # the last chunk's resume checkpoint (as in its `k`)
    made: int = 0  # audio records this attempt appended
    renewed: float = 0.0  # when the last append that renewed the lease was sent (our clock)
    lease_records: int = 0  # renewals written in `leases/<id>`
    lease_lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # renewal vs release
    limits: Limits = field(default_factory=lambda: _CONTRACT)  # the store's: records fit them
    # Opened ahead of its admission for its first chunk only (its creator wants its first
    # audio at once); it keeps its place in line, and goes on once admitted by capacity.
    parked: bool = False
    # No longer active here (ended, given up, or taken over): nothing more is written for it.
    dropped: bool = False
    # Made with the device's spare time only (a book's chapter nobody listens to yet): the
    # policy gives it a chunk only when no listener needs one (`_policy`). Its listener
    # opening it promotes it (`Admission`): from then on it is any listener's cast.
    background: bool = False

    @property
    def id(self) -> str:
        return self.job.id

    @property
    def waits(self) -> bool:
        """Parked with its first chunk made: it waits in line and is neither run nor
        counted until admitted."""
        return self.parked and self.made > 0

    @property
    def stream(self) -> str:
        return cast_stream(self.job.id)

    @property
    def attempt(self) -> int:
        return self.start.attempt

    @property
    def index(self) -> int:
        """The index (`i`) the next audio record gets."""
        return self.start.keep + self.made

    @property
    def spans(self) -> list[RecordSpan]:
        """The playable sequence so far, as seq spans."""
        return playable_spans(self.start, self.start_seq, self.made)

    def promote(self, now_s: float, now_ms: int) -> None:
        """A background cast someone opened: a listener's from now. Nobody listened to what
        was made, so its listeners' clock starts now (`now_s` on the worker's clock, `now_ms`
        the writer's), with all of it ahead of them."""
        self.background = False
        if self.origin_s is not None:
            self.origin_s, self.origin_ms = now_s, now_ms

    def advance(self, update: Update, landed: Landed, *, sample_rate: int) -> None:
        """`update`'s records are durable (`landed`): move the cast on. A new attempt's
        `start` begins its own records (and, going back, its encoder, plan and playable
        sequence are those it goes on from); a chunk moves the plan past it, the playable
        sequence and its compute on, and the listeners' clock: the first audio starts it (the
        start hold later), and when a chunk lands after the listener ran dry, the listener
        resumes then."""
        self.next_seq = landed.next_seq
        self.renewed = max(self.renewed, landed.sent)
        if update.start is not None:
            self.start, self.start_seq, self.made = update.start, landed.start_seq, 0
            going = update.going
            if going is not None:
                self.encoder, self.plan, self.resume = going.encoder, going.plan, going.resume
                self.samples = going.resume.samples if going.resume is not None else 0
                self.gen_s = going.resume.gen_ms / 1000 if going.resume is not None else 0.0
                if not going.keep:  # it starts over: nobody has heard any of it
                    self.origin_ms, self.origin_s = 0, None
            return
        self.made += update.made
        if update.planned is None:  # the records that end the file: no chunk, no audio
            return
        if self.origin_ms == 0:  # the playable sequence's first audio, held
            self.origin_ms = landed.first_ms + update.held_ms
        if self.origin_s is None:
            self.origin_s = landed.at + update.held_ms / 1000
        else:
            lead = self.samples / sample_rate - (landed.at - self.origin_s)
            if lead < 0:  # the listener waited at the live edge: it resumes now
                self.origin_s -= lead
        self.samples += update.samples
        self.gen_s += update.gen_s
        self.plan.take()
        self.resume = update.resume or self.resume

    def lead(self, now: float, sample_rate: int) -> float | None:
        """Seconds of audio a listener on the listeners' clock has buffered."""
        if self.origin_s is None:
            return None
        return self.samples / sample_rate - (now - self.origin_s)


class ActiveCasts:
    """The casts this worker makes now, by id, in the order they were opened: one object, owned
    by the loop (`Worker`). Admission, attempts and ownership are handed it (or the casts they
    need) and say what changed; only the loop adds and drops casts. A dropped cast is marked
    (`Admitted.dropped`), so a lease renewal already under way writes nothing after it."""

    def __init__(self) -> None:
        self._casts: dict[str, Admitted] = {}

    def __len__(self) -> int:
        return len(self._casts)

    def __iter__(self) -> Iterator[Admitted]:
        return iter(list(self._casts.values()))

    def __contains__(self, cast_id: object) -> bool:
        return cast_id in self._casts

    def __getitem__(self, cast_id: str) -> Admitted:
        return self._casts[cast_id]

    def get(self, cast_id: str) -> Admitted | None:
        return self._casts.get(cast_id)

    def add(self, cast: Admitted) -> None:
        self._casts[cast.id] = cast

    def drop(self, cast: Admitted) -> None:
        """`cast` is no longer made here (a newer cast of the same id stays)."""
        cast.dropped = True
        if self._casts.get(cast.id) is cast:
            del self._casts[cast.id]

    @property
    def admitted(self) -> int:
        """Casts admitted by capacity (not those parked ahead of their turn, nor background
        ones: those take no listener's room)."""
        return sum(1 for c in self._casts.values() if not c.parked and not c.background)

    @property
    def parked(self) -> int:
        return sum(1 for cast in self._casts.values() if cast.parked)

    def making(self) -> list[Admitted]:
        """The casts but those parked in line after their first chunk."""
        return [cast for cast in self._casts.values() if not cast.waits]

    def in_line(self) -> list[str]:
        """The admitted casts' ids, in line order."""
        admitted = [c for c in self._casts.values() if not c.parked]
        return [c.id for c in sorted(admitted, key=lambda c: c.job.offset)]
