"""The attempt lifecycle: opening an attempt, reopening one after a chunk fails, deciding that a
cast ends (its receipt or its terminal error are written by `_endings`), and the failure
accounting.

**Resume by reference.** A new attempt (after a crash, a takeover, a failed chunk or a retry
asked after an `error`) keeps every chunk of the playable sequence already durable and makes
only the rest: its `start` says how many records it keeps (`keep`, with their seq spans), its
encoder continues the file from the last kept record's checkpoint (`k`), and its plan goes on
from that record's position (`p`). Nothing is copied or made again. It keeps nothing when the
earlier audio cannot continue: another model, encoder (format, settings) or plan (chunk
policy, timing, planner) than the previous attempt's `start` names, or no checkpoint to go on
from; then it starts over with a new plan and encoder (and readers start over too).

**Failure accounting**, per chunk: an attempt counts the failures of the chunk it starts with
(`chunk_failures` in its `start`; they reset once a chunk after it is made). A chunk that
raises in the engine or encoder is a failure; past `retries` of them the cast gets a terminal
`error` and its job goes to `jobs/dead`. A worker that dies with a chunk in flight (its last
notice names it: killed, crashed, or stopped by a store error) counts a failure of that chunk
too, but never a verdict on its own: the cast is given up only once the same chunk has also
killed the worker again (`deaths` >= 2). A stop (SIGTERM) or a death while making another
cast does not count.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass

import msgspec

from speechd.casts import (
    AudioChunk,
    CastHead,
    Eos,
    Event,
    Recipe,
    Start,
    WorkerNotice,
    audio_record,
    cast_stream,
    catalog_stream,
    decode,
    eos_record,
    kept_spans,
    last_notice,
    resume_point,
    start_record,
)
from speechd.durable import (
    AppendRecord,
    RecordTooLarge,
    SeqMismatch,
    Store,
)

from ._cast import Admitted, JobRef
from ._costs import PlanTiming
from ._endings import RECEIPTS, Endings
from ._intake import Intake
from ._ownership import Ownership
from ._plan import CastPlan, model_fingerprint, open_plan, plan_fingerprint
from ._protocols import ChunkLike, ChunkPolicyLike, EncoderFactory, EncoderLike, EngineLike
from ._render import ChunkFailed, Resume, end_file, read_resume
from ._thread import EngineThread

__all__ = ["Attempts"]

log = logging.getLogger("speechd.worker")

_CHARS_PER_CHUNK = 200  # a rough mean over progressive chunks (short first, then sentences)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Attempts:
    """Opens and ends the attempts of the casts in `active` (shared with the loop)."""

    def __init__(
        self,
        store: Store,
        engine: EngineLike,
        thread: EngineThread,
        intake: Intake,
        ownership: Ownership,
        active: MutableMapping[str, Admitted],
        *,
        worker_id: str,
        chunk_policy: ChunkPolicyLike,
        encoders: EncoderFactory,
        retries: int,
        receipts: int = RECEIPTS,
        clock: Callable[[], float],
        previous_life: Callable[[], WorkerNotice | None],
    ) -> None:
        self._store = store
        self._engine = engine
        self._thread = thread
        self._intake = intake
        self._ownership = ownership
        self._active = active
        self._worker_id = worker_id
        self._chunk_policy = chunk_policy
        self._encoders = encoders
        self._retries = retries
        self._endings = Endings(store, intake, ownership, worker_id=worker_id, receipts=receipts)
        self._clock = clock
        self._previous_life = previous_life

    # -- opening ---------------------------------------------------------------------------

    async def open(self, job: JobRef, head: CastHead, timing: PlanTiming) -> None:
        """Start `job`'s cast with attempt n+1 after `head` (what `read_head` found), keeping
        what can continue; or end it, if it has failed for good."""
        attempt = head.attempt + 1
        counts = await self._count_death(job, head)
        if counts is None:
            return
        failures, chunk_failures, deaths = counts
        try:
            recipe = await self._recipe(job.id)
        except (IndexError, msgspec.DecodeError):
            message = "the cast has no readable recipe"
            await self._endings.give_up(job, head.tail, head.attempt, message, head.start_seq)
            return
        try:
            going = await self._continuation(job, head, recipe)
            if going is None:
                encoder = self._encoders(recipe.format, self._engine.sample_rate)
                going = _Going(await self._plan(recipe, timing), timing, 0, False, None, encoder)
        except Exception as exc:
            log.warning("cast %s cannot be planned: %s", job.id, exc)
            message = f"the text could not be planned: {exc}"
            await self._endings.give_up(job, head.tail, head.attempt, message, head.start_seq)
            return
        plan, timing, keep, complete = going.plan, going.timing, going.keep, going.complete
        resume, encoder = going.resume, going.encoder
        if keep == 0 and head.length:  # starting over: the counted chunk is not its first
            chunk_failures = deaths = 0
        origin_ms = 0
        if keep:
            retried = head.event == Event.RETRY  # nobody listened since it failed
            origin_ms = _now_ms() if retried else (head.origin_ms or _now_ms())
        start = Start(
            attempt=attempt,
            worker=self._worker_id,
            chunks=max(keep, 1) + _chunks_estimate(recipe),
            rtf=timing.rtf,
            failures=failures,
            lease_ms=self._ownership.lease_ms,
            overhead_s=timing.overhead_s,
            max_chunk_s=timing.max_chunk_s,
            keep=keep,
            kept=kept_spans(head.spans, keep),
            origin_ms=origin_ms,
            model=model_fingerprint(self._engine),
            encoder=encoder.fingerprint,
            plan=plan.fingerprint,
            chunk_failures=chunk_failures,
            deaths=deaths,
        )
        records = [start_record(start)]
        if complete:  # every chunk is durable already; only the eos is missing
            records.append(eos_record(attempt, _eos(head, resume), head.tail))
        sent = self._clock()
        try:
            ack = await self._store.append(cast_stream(job.id), records, match_seq_num=head.tail)
        except SeqMismatch as lost:
            self._ownership.defer(job, lost.next_seq)
            return
        cast = Admitted(
            job=job,
            recipe=recipe,
            plan=plan,
            timing=timing,
            start=start,
            start_seq=ack.start_seq,
            next_seq=ack.next_seq,
            encoder=encoder,
            samples=resume.samples if resume is not None else 0,
            gen_s=resume.gen_ms / 1000 if resume is not None else 0.0,
            origin_ms=origin_ms,
            origin_s=self._clock() - (_now_ms() - origin_ms) / 1000 if origin_ms else None,
            resume=resume,
            renewed=sent,
            limits=self._store.limits,
        )
        log.info(
            "cast %s: attempt %d keeps %d records%s, planned for %s",
            job.id,
            attempt,
            keep,
            " (all of them)" if complete else "",
            timing,
        )
        if complete:
            await self._endings.finished(cast, _eos(head, resume))
        else:  # planned by the loop, a bounded step at a time
            self._active[job.id] = cast

    async def _count_death(self, job: JobRef, head: CastHead) -> tuple[int, int, int] | None:
        """The new attempt's (failures, chunk_failures, deaths): the last attempt's, plus one
        if its worker died with a chunk in flight. None: that was the verdict (it is given up).
        """
        latest = head.start
        if latest is None:
            return 0, 0, 0
        counts = (latest.failures, 0, 0)
        if head.event not in (Event.START, Event.AUDIO):  # it ended; no death to count
            return counts
        if not await self._died_on(job.id, latest.worker, head.length):
            return counts
        same = head.length == latest.keep  # it died on the chunk it began with
        chunk_failures = (latest.chunk_failures if same else 0) + 1
        deaths = (latest.deaths if same else 0) + 1
        log.warning(
            "cast %s: worker %s died making its record %d (failure %d of that chunk, %d "
            "deaths; %d allowed)",
            job.id,
            latest.worker,
            head.length,
            chunk_failures,
            deaths,
            self._retries,
        )
        if chunk_failures > self._retries and deaths >= 2:
            message = f"the worker died {deaths} times making record {head.length}"
            await self._endings.give_up(job, head.tail, latest.attempt, message, head.start_seq)
            return None
        return latest.failures + 1, chunk_failures, deaths

    async def _continuation(self, job: JobRef, head: CastHead, recipe: Recipe) -> _Going | None:
        """How a new attempt goes on from `head`'s playable sequence; None when it cannot
        (then it starts over)."""
        latest = head.start
        if latest is None or not head.spans or latest.rtf is None or not latest.plan:
            return None
        fmt, rate = recipe.format, self._engine.sample_rate
        fresh = self._encoders(fmt, rate)
        if (latest.model, latest.encoder) != (model_fingerprint(self._engine), fresh.fingerprint):
            return None
        timing = PlanTiming(latest.rtf, latest.overhead_s, latest.max_chunk_s)
        if plan_fingerprint(self._engine, self._policy(recipe, timing)) != latest.plan:
            return None
        final = head.final
        point = await resume_point(self._store, job.id, head)
        try:
            resume = read_resume(point.resume) if point is not None else None
            if final is not None and final.index == final.planned - 1:
                # Every chunk is durable (the record that ended the file says so: see `n` in
                # `_plan`; it has no checkpoint); only the eos is missing.
                plan = await self._plan(recipe, timing, position=final.plan or None)
                return _Going(plan, timing, head.length, True, resume, fresh)
            if point is None or resume is None or not point.plan:
                return None
            plan = await self._plan(recipe, timing, position=point.plan)
            encoder = self._encoders(fmt, rate, resume=resume.encoder)
        except ValueError as exc:
            log.warning("cast %s: its audio cannot be continued (%s); starting over", job.id, exc)
            return None
        return _Going(plan, timing, point.index + 1, False, resume, encoder)

    def retime(self, cast: Admitted, timing: PlanTiming) -> None:
        """Cut the cast's chunks not cut yet for `timing` (on the loop, between engine calls);
        its `start` keeps the timing it was opened with, which a later attempt plans with."""
        cast.plan.planner.retime(self._policy(cast.recipe, timing))

    def _policy(self, recipe: Recipe, timing: PlanTiming) -> ChunkPolicyLike:
        return timing.apply(self._chunk_policy).with_speed(recipe.speed)

    async def _plan(
        self, recipe: Recipe, timing: PlanTiming, *, position: str | None = None
    ) -> CastPlan:
        """The cast's plan, from its start or from `position` (ValueError if the planner
        cannot read it); not stepped yet: the loop plans it a step at a time."""
        policy = self._policy(recipe, timing)
        make = functools.partial(
            open_plan,
            live=recipe.live,
            position=position,
            ssml=recipe.input_format == "ssml",
            normalize=recipe.normalize,
        )
        return await self._thread.call(make, self._engine, recipe.text, recipe.voice, policy)

    async def plan_failed(self, cast: Admitted, error: Exception) -> None:
        """The cast's text could not be planned (a planner error, not a chunk's): give it up."""
        log.warning("cast %s cannot be planned: %r", cast.id, error)
        self._active.pop(cast.id, None)
        message = f"the text could not be planned: {error}"
        await self._endings.give_up(cast.job, cast.next_seq, cast.attempt, message, cast.start_seq)
        await self._ownership.release(cast)

    async def _died_on(self, cast_id: str, owner: str, index: int) -> bool:
        """Whether the (dead) worker `owner` died making record `index` of `cast_id`: its last
        notice named that record as in flight."""
        if owner == self._worker_id:
            notice = self._previous_life()
        else:
            found = await last_notice(self._store, owner)
            notice = found[1] if found else None
        return notice is not None and (notice.cast, notice.chunk) == (cast_id, index)

    async def _recipe(self, cast_id: str) -> Recipe:
        batch = await self._store.read(catalog_stream(cast_id), 0, max_records=1)
        return decode(batch.records[0].body, Recipe)

    # -- a chunk that failed ---------------------------------------------------------------

    async def chunk_failed(self, cast: Admitted, chunk: ChunkLike, failed: ChunkFailed) -> None:
        """Count the failure; reopen the cast with a new attempt, or give it up."""
        log.warning(
            "cast %s: chunk %d failed in attempt %d: %r",
            cast.id,
            chunk.index,
            cast.attempt,
            failed.cause,
        )
        same = cast.made == 0  # it failed on the chunk this attempt began with
        chunk_failures = (cast.start.chunk_failures if same else 0) + 1
        deaths = cast.start.deaths if same else 0
        if chunk_failures > self._retries:
            self._active.pop(cast.id, None)
            message = f"chunk {chunk.index} failed {chunk_failures} times: {failed}"
            await self._endings.give_up(
                cast.job, cast.next_seq, cast.attempt, message, cast.start_seq
            )
            await self._ownership.release(cast)
            return
        keep, kept = cast.index, cast.spans
        if not failed.encoder_intact:  # it may hold part of the chunk: go on from the last record
            fmt, rate = cast.recipe.format, self._engine.sample_rate
            if cast.resume is not None:
                cast.encoder = self._encoders(fmt, rate, resume=cast.resume.encoder)
            else:  # nothing to go on from: start over, plan and all
                cast.encoder = self._encoders(fmt, rate)
                keep, kept = 0, []
                cast.plan = await self._plan(cast.recipe, cast.timing)
                cast.samples, cast.gen_s = 0, 0.0
                cast.origin_ms, cast.origin_s = 0, None
        start = msgspec.structs.replace(
            cast.start,
            attempt=cast.attempt + 1,
            failures=cast.start.failures + 1,
            keep=keep,
            kept=kept,
            origin_ms=cast.origin_ms,
            chunk_failures=chunk_failures,
            deaths=deaths,
        )
        start_seq = cast.next_seq
        if await self.append(cast, [start_record(start)]) is not None:
            cast.start, cast.start_seq, cast.made = start, start_seq, 0
            log.info("cast %s: attempt %d from record %d", cast.id, cast.attempt, cast.index)

    # -- appending and ending --------------------------------------------------------------

    async def append(
        self, cast: Admitted, records: list[AppendRecord], *, chunk: ChunkLike | None = None
    ) -> int | None:
        """Append to the cast's stream where this worker expects, in batches that fit the
        store; the first record's timestamp, or None if another worker has taken the cast
        over (it is dropped) or, with `chunk` (the chunk the records are of), a record is
        over the store's limits: nothing is appended, and the chunk failed."""
        first: int | None = None
        try:
            batches = self._store.limits.batches(records)  # every record checked first
        except RecordTooLarge as exc:
            if chunk is None:
                raise
            await self.chunk_failed(cast, chunk, ChunkFailed(exc, encoder_intact=False))
            return None
        for batch in batches:
            sent = self._clock()
            try:
                ack = await self._store.append(cast.stream, batch, match_seq_num=cast.next_seq)
            except SeqMismatch as lost:
                log.warning("cast %s was taken over by another worker; dropping it", cast.id)
                self._active.pop(cast.id, None)
                self._ownership.defer(cast.job, lost.next_seq)
                return None
            first = ack.timestamp if first is None else first
            cast.next_seq = ack.next_seq
            cast.renewed = max(cast.renewed, sent)
        return first

    async def done(self, cast: Admitted, eos: Eos) -> None:
        """The cast's eos is durable: its receipt, its job finished."""
        self._active.pop(cast.id, None)
        await self._endings.finished(cast, eos)

    async def end_file(self, cast: Admitted) -> None:
        """The plan is done and its last chunk did not end the file (a live cast's input
        closed after it was spoken; or a text that plans to no chunks): one record of what
        the encoder adds for no samples (an mp3's last frames, a header for an empty file),
        then eos."""
        body = await self._thread.call(end_file, cast.encoder)
        offset_ms = cast.samples * 1000 // self._engine.sample_rate
        chunk = AudioChunk(
            cast.attempt,
            cast.index,
            cast.index + 1,
            offset_ms,
            0,
            "",
            body,
            plan=cast.plan.planner.position,
            start_seq=cast.start_seq,
        )
        eos = Eos(chunks=cast.index + 1, audio_ms=offset_ms, gen_ms=round(cast.gen_s * 1000))
        records = [audio_record(chunk), eos_record(cast.attempt, eos, cast.start_seq)]
        if await self.append(cast, records) is not None:
            await self.done(cast, eos)


@dataclass(frozen=True, slots=True)
class _Going:
    """How a new attempt goes: its plan and timing, the records it keeps, whether they are
    all of it (only the eos is missing), the kept records' resume state and its encoder."""

    plan: CastPlan
    timing: PlanTiming
    keep: int
    complete: bool
    resume: Resume | None
    encoder: EncoderLike


def _chunks_estimate(recipe: Recipe) -> int:
    """Chunks a new plan is guessed to make (the `start`'s `chunks`; `n` on each record is
    the better estimate once audio comes): a live cast's text is not known yet."""
    return 1 if recipe.live else max(1, math.ceil(len(recipe.text) / _CHARS_PER_CHUNK))


def _eos(head: CastHead, resume: Resume | None) -> Eos:
    """The eos of a cast whose chunks are all durable already (`head`'s playable sequence)."""
    gen_ms = resume.gen_ms if resume is not None else 0
    return Eos(chunks=head.length, audio_ms=head.audio_ms, gen_ms=gen_ms)
