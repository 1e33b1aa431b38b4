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

import asyncio
import enum
import logging
import math
import time
from collections.abc import Callable, Sequence

import msgspec

from speechd.casts import CastHead, kept_spans, last_notice, read_head
from speechd.casts.schema import (
    AudioChunk,
    Eos,
    Event,
    Recipe,
    RecordSpan,
    Start,
    WorkerNotice,
    audio_record,
    cast_stream,
    catalog_stream,
    decode,
    eos_record,
    start_record,
)
from speechd.durable import SeqMismatch, Store

from ._cast import Admitted, JobRef, Landed, Update
from ._continuation import Going, Plans, Resume
from ._costs import PlanTiming
from ._endings import RECEIPTS, Endings
from ._intake import Intake
from ._ownership import Ownership
from ._plan import model_fingerprint
from ._protocols import ChunkLike, ChunkPolicyLike, EncoderFactory, EngineLike
from ._render import ChunkFailed, end_file
from ._thread import EngineThread

__all__ = ["Attempts", "Fate"]

log = logging.getLogger("speechd.worker")

_CHARS_PER_CHUNK = 200  # a rough mean over progressive chunks (short first, then sentences)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Fate(enum.Enum):
    """What became of a cast that an attempt method touched: it goes on here, or it is no
    longer this worker's to make (the loop drops it from its active casts)."""

    GOES_ON = "goes on"
    ENDED = "ended"  # eos or a terminal error is durable, its job finished
    LOST = "lost"  # another worker took it over (its job is deferred to it)


class Attempts:
    """Opens and ends the attempts of the casts this worker makes. It holds no casts: each
    method is handed the cast it works on and says what became of it (`Fate`); the loop owns
    the active casts (`ActiveCasts`).

    `last_words` is what this worker id's previous process said last (its last notice, read
    by the loop as it starts): whether it died making a chunk of a cast it opens again."""

    def __init__(
        self,
        store: Store,
        engine: EngineLike,
        thread: EngineThread,
        intake: Intake,
        ownership: Ownership,
        *,
        worker_id: str,
        chunk_policy: ChunkPolicyLike,
        encoders: EncoderFactory,
        retries: int,
        receipts: int = RECEIPTS,
        clock: Callable[[], float],
    ) -> None:
        self._store = store
        self._engine = engine
        self._thread = thread
        self._intake = intake
        self._ownership = ownership
        self._worker_id = worker_id
        self._chunk_policy = chunk_policy
        self._encoders = encoders
        self._plans = Plans(store, engine, thread, chunk_policy, encoders)
        self._retries = retries
        self._endings = Endings(store, intake, ownership, worker_id=worker_id, receipts=receipts)
        self._clock = clock
        self.last_words: WorkerNotice | None = None

    # -- opening ---------------------------------------------------------------------------

    async def open(self, job: JobRef, head: CastHead, timing: PlanTiming) -> Admitted | None:
        """Start `job`'s cast with attempt n+1 after `head` (what `read_head` found), keeping
        what can continue: the cast to make (the caller makes it active). None when there is
        nothing to make: it has failed for good, every chunk was durable already (its eos is
        appended now), or another worker took it meanwhile."""
        attempt = head.attempt + 1
        counts = await self._count_death(job, head)
        if counts is None:
            return None
        failures, chunk_failures, deaths = counts
        try:
            recipe = await self._recipe(job.id)
        except (IndexError, msgspec.DecodeError):
            message = "the cast has no readable recipe"
            await self._endings.give_up(job, head.tail, head.attempt, message, head.start_seq)
            return None
        try:
            going = await self._plans.continuation(job.id, head, recipe)
            if going is None:
                encoder = self._encoders(recipe.format, self._engine.sample_rate)
                plan = await self._plans.plan(recipe, timing)
                going = Going(plan, timing, 0, False, None, encoder)
        except Exception as exc:
            log.warning("cast %s cannot be planned: %s", job.id, exc)
            message = f"the text could not be planned: {exc}"
            await self._endings.give_up(job, head.tail, head.attempt, message, head.start_seq)
            return None
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
            return None
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
            return None
        return cast  # planned by the loop, a bounded step at a time

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

    def retime(self, cast: Admitted, timing: PlanTiming) -> None:
        """Cut the cast's chunks not cut yet for `timing` (on the loop, between engine calls);
        its `start` keeps the timing it was opened with, which a later attempt plans with."""
        cast.plan.planner.retime(self._plans.policy(cast.recipe, timing))

    async def plan_failed(self, cast: Admitted, error: Exception) -> Fate:
        """The cast's text could not be planned (a planner error, not a chunk's): give it up."""
        log.warning("cast %s cannot be planned: %r", cast.id, error)
        await self._ownership.release(cast)
        message = f"the text could not be planned: {error}"
        await self._endings.give_up(cast.job, cast.next_seq, cast.attempt, message, cast.start_seq)
        return Fate.ENDED

    async def _died_on(self, cast_id: str, owner: str, index: int) -> bool:
        """Whether the (dead) worker `owner` died making record `index` of `cast_id`: its last
        notice named that record as in flight (alone, or in a batch)."""
        if owner == self._worker_id:
            notice = self.last_words
        else:
            found = await last_notice(self._store, owner)
            notice = found[1] if found else None
        if notice is None:
            return False
        return (notice.cast, notice.chunk) == (cast_id, index) or any(
            (cast, chunk) == (cast_id, index) for cast, chunk in notice.batch
        )

    async def _recipe(self, cast_id: str) -> Recipe:
        batch = await self._store.read(catalog_stream(cast_id), 0, max_records=1)
        return decode(batch.records[0].body, Recipe)

    # -- a chunk that failed ---------------------------------------------------------------

    async def chunk_failed(self, cast: Admitted, chunk: ChunkLike, failed: ChunkFailed) -> Fate:
        """Count the failure; reopen the cast with a new attempt (it goes on), or give it up."""
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
            await self._ownership.release(cast)
            message = f"chunk {chunk.index} failed {chunk_failures} times: {failed}"
            await self._endings.give_up(
                cast.job, cast.next_seq, cast.attempt, message, cast.start_seq
            )
            return Fate.ENDED
        keep, kept, going = cast.index, cast.spans, None
        if not failed.encoder_intact:  # it may hold part of the chunk
            going, kept = await self._go_back(cast)
            keep = going.keep
        start = msgspec.structs.replace(
            cast.start,
            attempt=cast.attempt + 1,
            failures=cast.start.failures + 1,
            keep=keep,
            kept=kept,
            origin_ms=cast.origin_ms if keep else 0,
            chunk_failures=chunk_failures,
            deaths=deaths,
        )
        batches = self._store.limits.batches([start_record(start)])
        update = Update(batches, start=start, going=going)
        fate = await self._apply(cast, update, await self._send(cast, update))
        if fate is Fate.GOES_ON:
            log.info("cast %s: attempt %d from record %d", cast.id, cast.attempt, cast.index)
        return fate

    async def _go_back(self, cast: Admitted) -> tuple[Going, list[RecordSpan]]:
        """The encoder may hold part of a failed chunk: go on exactly as an attempt opened
        after a crash would (`Plans.continuation`, from the store): from the last durable
        record that carries a checkpoint, its encoder and plan position, keeping the records
        up to it; or, with none, from the start, plan and all. Returns how the next attempt
        goes and the spans it keeps. (Going on from the cast's own last checkpoint while
        keeping every record misaligned the file when a chunk after that checkpoint had none
        of its own.)"""
        head = await read_head(self._store, cast.id)
        going = await self._plans.continuation(cast.id, head, cast.recipe)
        if going is None or going.complete:
            encoder = self._encoders(cast.recipe.format, self._engine.sample_rate)
            plan = await self._plans.plan(cast.recipe, cast.timing)
            return Going(plan, cast.timing, 0, False, None, encoder), []
        return going, kept_spans(head.spans, going.keep)

    # -- appending and ending --------------------------------------------------------------

    async def land(
        self, casts: Sequence[Admitted], updates: Sequence[Update | ChunkFailed]
    ) -> list[Fate]:
        """Apply one step's outcome (`_update.step_outcome`: per cast, its update or its
        chunk's failure) and say what became of each cast, in order. Every cast's records go
        to the store together: each cast's in the store's batches, in turn, each conditional
        on the seq the worker expects; the casts at once (one go at the store, which commits
        them together where it can). Then each cast moves on by its update (and ends with its
        eos), or its failed chunk is counted (`chunk_failed`). A cast taken over meanwhile is
        LOST alone; a store error for one cast is raised once the others are applied (it ends
        the worker, as any store error does)."""
        landing = [(c, u) for c, u in zip(casts, updates, strict=True) if isinstance(u, Update)]
        sending = [self._send(cast, update) for cast, update in landing]
        sent = iter(await asyncio.gather(*sending, return_exceptions=True))
        fates: list[Fate] = []
        error: BaseException | None = None
        for cast, update in zip(casts, updates, strict=True):
            if isinstance(update, ChunkFailed):
                chunk = cast.plan.ahead[0].chunk  # the plan did not move past it
                fates.append(await self.chunk_failed(cast, chunk, update))
                continue
            landed = next(sent)
            if isinstance(landed, BaseException):
                error = error or landed
                continue
            fates.append(await self._apply(cast, update, landed))
        if error is not None:
            raise error
        return fates

    async def _send(self, cast: Admitted, update: Update) -> Landed | None:
        """Append `update`'s batches to the cast's stream in turn, each where this worker
        expects (`match_seq_num`): where they landed, or None once another worker has taken
        the cast over (its job is deferred to it; nothing more is appended)."""
        next_seq, first, sent = cast.next_seq, None, 0.0
        for batch in update.batches:
            sent = self._clock()
            try:
                ack = await self._store.append(cast.stream, batch, match_seq_num=next_seq)
            except SeqMismatch as lost:
                log.warning("cast %s was taken over by another worker; dropping it", cast.id)
                self._ownership.defer(cast.job, lost.next_seq)
                return None
            first = ack if first is None else first
            next_seq = ack.next_seq
        assert first is not None, "an update appends at least one record"
        return Landed(first.start_seq, first.timestamp, next_seq, sent, self._clock())

    async def _apply(self, cast: Admitted, update: Update, landed: Landed | None) -> Fate:
        """Move the cast on by `update`, whose records `landed` (None: it was taken over),
        and end it with its eos."""
        if landed is None:
            return Fate.LOST
        cast.advance(update, landed, sample_rate=self._engine.sample_rate)
        if update.held_ms:
            log.info(
                "cast %s: its listeners start %.1f s after its first audio",
                cast.id,
                update.held_ms / 1000,
            )
        if update.eos is not None:
            return await self.done(cast, update.eos)
        return Fate.GOES_ON

    async def abandon(self, cast: Admitted) -> Fate:
        """Stop making `cast` here, writing nothing into it (its book was cancelled while it
        was made in the background, and a chapter's cast may be someone else's too): its
        lease is released and its job finished. What it made stays; a later job for it (the
        book made again, or the same request) resumes it by reference."""
        await self._ownership.release(cast)
        await self._intake.finish(cast.job)
        log.info("cast %s: its book was cancelled; it stops here as it is", cast.id)
        return Fate.ENDED

    async def done(self, cast: Admitted, eos: Eos) -> Fate:
        """The cast's eos is durable: its receipt, its job finished."""
        await self._endings.finished(cast, eos)
        return Fate.ENDED

    async def end_file(self, cast: Admitted) -> Fate:
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
        gen_ms = round(cast.gen_s * 1000)
        eos = Eos(chunks=cast.index + 1, audio_ms=offset_ms, gen_ms=gen_ms, samples=cast.samples)
        records = [audio_record(chunk), eos_record(cast.attempt, eos, cast.start_seq)]
        update = Update(self._store.limits.batches(records), made=1, eos=eos)
        return await self._apply(cast, update, await self._send(cast, update))


def _chunks_estimate(recipe: Recipe) -> int:
    """Chunks a new plan is guessed to make (the `start`'s `chunks`; `n` on each record is
    the better estimate once audio comes): a live cast's text is not known yet."""
    return 1 if recipe.live else max(1, math.ceil(len(recipe.text) / _CHARS_PER_CHUNK))


def _eos(head: CastHead, resume: Resume | None) -> Eos:
    """The eos of a cast whose chunks are all durable already (`head`'s playable sequence)."""
    gen_ms = resume.gen_ms if resume is not None else 0
    samples = resume.samples if resume is not None else 0
    return Eos(chunks=head.length, audio_ms=head.audio_ms, gen_ms=gen_ms, samples=samples)
