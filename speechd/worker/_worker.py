"""The cast worker's loop: job intake, admission, one chunk at a time, crash-safe progress.

In the manner of vLLM's busy loop: admit what the policy lets in, ask the policy for one step
(`Run` a chunk, `Sleep`, or stay `Idle`), do it, repeat. Everything that changes the worker's
state runs on this one loop; side tasks only read `jobs` (long-poll), beat the heart and
renew the leases of active casts (see `_lease`).
The engine runs on its own thread, one call at a time.

Progress is durable and idempotent (DESIGN.md §3):

* Jobs are read from the committed cursor on. A job whose cast ends in eos/error, or whose cast
  is already active here, is finished at once. A cast whose latest attempt's owner still holds
  its lease (see `_lease`) is left to it, and looked at again every heartbeat (or half lease);
  once the lease ran out, it is taken over with a new attempt.
* Starting a cast appends `start` (attempt n+1), carrying this worker's lease; every cast
  record is appended with `match_seq_num` = the seq this worker expects next, and renews the
  lease; a cast with nothing to append for a third of the lease gets a renewal in
  `leases/<id>` (also while the worker sleeps ahead of its listeners). A failed condition means
  another worker took the cast over: it is dropped without writing more.
* Each chunk's synthesis is seeded from (cast id, chunk index), so a new attempt makes the same
  audio and readers splice attempts at chunk boundaries. A chunk longer than `MAX_RECORD_S` is
  appended as several audio records (record indices stay dense; `n` grows to match).
* After the last chunk, `eos` (in the same append as the last audio), then a receipt in
  `progress/done`. The cursor moves only over a contiguous run of finished jobs.
* A chunk that raises starts a new attempt: when only the engine failed, the attempt re-appends
  the chunks made so far (the encoder is intact) and carries on; when encoding failed it starts
  over. A chunk that kills the process counts too: a heartbeat naming the chunk in flight is
  written as each chunk starts, so whoever resumes the cast knows the last life died on it.
  Each `start` carries the failures before it; past `retries` the job goes to `jobs/dead` and
  the cast gets a terminal `error`. A stop, or a crash while rendering another cast, does not
  count against a cast.
* A text that plans to no chunks still gets a valid file: one audio record holding the
  encoder's output for zero samples (a header, for formats that have one), then `eos`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import logging
import math
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from speechd.casts import (
    H_ATTEMPT,
    JOBS,
    JOBS_CURSOR,
    JOBS_DEAD,
    PROGRESS_DONE,
    WORKERS_PREFIX,
    AudioChunk,
    Cursor,
    DeadJob,
    Eos,
    Event,
    Failure,
    Job,
    Lease,
    Receipt,
    Recipe,
    Start,
    WorkerNotice,
    audio_record,
    cast_stream,
    catalog_stream,
    decode,
    encode,
    eos_record,
    error_record,
    event_of,
    lease_stream,
    record_words,
    start_record,
    worker_stream,
)
from speechd.durable import (
    MAX_BATCH_BYTES,
    MAX_BATCH_RECORDS,
    AppendRecord,
    SeqMismatch,
    SeqOutOfRange,
    Store,
)

from ._health import last_notice
from ._history import CastState, read_cast
from ._lease import lease_held
from ._policy import (
    QUANTUM_S,
    Candidate,
    CastView,
    ChunkTimes,
    DeadlinePolicy,
    Idle,
    PlanTiming,
    Policy,
    Run,
    Sleep,
    plan_timing,
)
from ._protocols import ChunkLike, ChunkPolicyLike, EncoderFactory, EncoderLike, EngineLike
from ._queue import committed_offset
from ._thread import EngineThread
from ._watermark import Watermark

if TYPE_CHECKING:
    from speechd.telemetry import Telemetry

__all__ = ["MAX_RECORD_S", "ROTATE_NOTICES", "Worker", "chunk_seed", "warm_up"]

log = logging.getLogger("speechd.worker")

MAX_RECORD_S = 15.0  # longest audio in one record: 15 s of 16-bit wav is ~720 KB < 1 MiB
ROTATE_NOTICES = 10_000  # a worker's stream starts over (with `ready`) after this many
_JOBS_PAGE = 256
_LOOKUPS = 32  # foreign casts whose tails are looked up at once
_MAX_PENDING = 10_000
_WARM_UP_CHUNKS = 4
_WARM_UP_TEXT = (
    "Hello there. This short warm up measures how fast this machine speaks, "
    "so that the first listener is served well. It reads a few sentences of different "
    "lengths, because a long chunk costs a little more per second of audio than a short one, "
    "and a short one pays a fixed price for every call on top of that."
)


def chunk_seed(cast_id: str, index: int) -> int:
    """The synthesis seed of chunk `index` of `cast_id`: the same in every attempt."""
    digest = hashlib.blake2b(f"{cast_id}/{index}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big")


def warm_up(
    engine: EngineLike, chunk_policy: ChunkPolicyLike, voice: str, times: ChunkTimes
) -> None:
    """Synthesize the chunks of a short text, short and long, and record their costs in
    `times` (the first call pays one-off costs: it is made twice, and measured the second
    time)."""
    chunks = engine.plan(_WARM_UP_TEXT, voice, chunk_policy.with_rtf(0.0, max_chunk_s=5.0))
    for n, chunk in enumerate([*chunks[:1], *chunks[:_WARM_UP_CHUNKS]]):
        begun = time.perf_counter()
        synthesis = engine.synthesize(chunk, voice, 1.0)
        gen_s = time.perf_counter() - begun
        samples = int(np.asarray(synthesis.pcm).size)
        if n > 0 and samples:
            times.observe(
                units=len(chunk.phonemes),
                chars=len(chunk.text),
                speed=1.0,
                gen_s=gen_s,
                audio_s=samples / engine.sample_rate,
            )


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class _Job:
    offset: int
    id: str


@dataclass(eq=False)
class _Cast:
    """An admitted cast: its plan, its current attempt, and where its stream stands."""

    job: _Job
    recipe: Recipe
    chunks: Sequence[ChunkLike]
    timing: PlanTiming  # what its plan was made for (kept by later attempts)
    attempt: int
    start_seq: int
    next_seq: int  # the seq this worker expects to append next
    encoder: EncoderLike
    failures: int  # attempts before this one that failed on this cast
    next_chunk: int = 0
    records: int = 0  # audio records appended in this attempt
    samples: int = 0  # samples appended in this attempt
    first_audio_s: float | None = None  # the listener's first audio (kept across a retry)
    gen_s: float = 0.0
    renewed: float = 0.0  # when the last append that renewed the lease was sent (our clock)
    lease_records: int = 0  # renewals written in `leases/<id>`
    lease_lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # renewal vs release

    @property
    def id(self) -> str:
        return self.job.id

    @property
    def stream(self) -> str:
        return cast_stream(self.job.id)


class _ChunkFailed(Exception):
    def __init__(self, cause: BaseException, *, encoder_intact: bool) -> None:
        super().__init__(str(cause) or type(cause).__name__)
        self.cause = cause
        self.encoder_intact = encoder_intact


@dataclass(frozen=True, slots=True)
class _Rendered:
    pieces: list[tuple[int, bytes]]  # (samples, encoded bytes) per audio record
    gen_s: float
    words: Sequence[Any] = ()  # the synthesis's word timings (speechd.engine.WordTiming)
    unit: str = ""


class Worker:
    """One worker's loop over a store and an engine (both injected).

    `run_worker` builds one for the real process; tests build one with a cost-model engine.
    Exactly one chunk is in flight at a time.
    """

    def __init__(
        self,
        store: Store,
        engine: EngineLike,
        *,
        worker_id: str,
        chunk_policy: ChunkPolicyLike,
        encoders: EncoderFactory,
        policy: Policy | None = None,
        times: ChunkTimes | None = None,
        retries: int = 2,
        max_active: int | None = None,
        quantum_s: float = QUANTUM_S,
        heartbeat_s: float = 5.0,
        lease_s: float = 15.0,
        stop_grace_s: float = 3.0,
        clock: Callable[[], float] = time.monotonic,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.id = worker_id
        self._telemetry = telemetry  # its readings ride on the notices; it counts our audio
        self.policy: Policy = policy if policy is not None else DeadlinePolicy()
        self.times = times if times is not None else ChunkTimes()
        self._store = store
        self._engine = engine
        self._chunk_policy = chunk_policy
        self._encoders = encoders
        self._retries = retries
        self._max_active = max_active
        self._quantum_s = quantum_s
        self._heartbeat_s = heartbeat_s
        self._lease_s = lease_s
        self._stop_grace_s = stop_grace_s
        self._clock = clock
        self._thread = EngineThread()
        self._active: dict[str, _Cast] = {}
        self._pending: deque[_Job] = deque()
        self._foreign: dict[int, _Job] = {}  # jobs whose cast another live worker owns
        # A foreign cast's tail when last seen moving, and when (our clock): its owner is alive.
        self._foreign_seen: dict[int, tuple[int, float]] = {}
        # The head of the line's cast as read before it had to wait for room.
        self._waiting_state: tuple[int, CastState] | None = None
        self._foreign_checked = 0.0
        self._watermark = Watermark()
        self._committed = 0
        self._cursor_tail = 0
        self._read_offset = 0
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._inflight: tuple[str, int] | None = None  # (cast, audio record) being rendered
        self._previous_life: WorkerNotice | None = None  # the last words of this id's last run
        # Language code -> why it cannot be spoken here; announced in `ready` (run_worker sets it).
        self.unspeakable: dict[str, str] = {}

    # -- public -------------------------------------------------------------------------

    @property
    def active(self) -> list[str]:
        """The casts admitted now, in line order."""
        return [c.id for c in sorted(self._active.values(), key=lambda c: c.job.offset)]

    @property
    def waiting(self) -> int:
        """Jobs read but not admitted yet."""
        return len(self._pending)

    @property
    def deferred(self) -> int:
        """Jobs left to another live worker that owns their cast (looked at every heartbeat)."""
        return len(self._foreign)

    async def warm_up(self, voice: str) -> None:
        """Synthesize a few chunks, short and long, once: the first listener meets a warm
        engine, and the first plan is made from measured costs rather than priors."""
        await self._thread.call(warm_up, self._engine, self._chunk_policy, voice, self.times)

    async def idle(self) -> None:
        """Wait until the engine is no longer busy with a chunk this worker abandoned on stop.
        A process that reuses the engine after `run` (a test, a benchmark) must await this
        first: the engine runs one call at a time. A worker process just exits."""
        await self._thread.idle()

    async def run(self, stop: asyncio.Event) -> None:
        """Announce ready, work until `stop` is set, then announce stopped.

        On stop the chunk in flight is appended if it finishes within the grace period, else
        abandoned; active casts are left as they are, for the next attempt to resume.
        """
        self._stop = stop
        await self._store.sweep(max(3600.0, 10 * self._heartbeat_s), [WORKERS_PREFIX])
        previous = await last_notice(self._store, self.id)
        self._previous_life = previous[1] if previous else None
        await self._store.delete(worker_stream(self.id))  # a previous life of this worker id
        self._cursor_tail = await self._store.check_tail(JOBS_CURSOR)
        self._committed = await committed_offset(self._store)
        self._watermark = Watermark(self._committed)
        self._read_offset = self._committed
        await self._announce("ready")
        log.info("worker %s ready; jobs from offset %d", self.id, self._committed)
        tasks = [
            asyncio.create_task(self._intake(), name="speechd-worker-intake"),
            asyncio.create_task(self._heartbeat(), name="speechd-worker-heartbeat"),
            asyncio.create_task(self._keep_leases(), name="speechd-worker-leases"),
            asyncio.create_task(self._wake_on_stop(), name="speechd-worker-stop"),
        ]
        try:
            while not stop.is_set():
                for task in tasks:
                    if task.done():
                        task.result()  # a side task died: let its error end the worker
                self._wake.clear()
                starved = await self._admit()
                if stop.is_set():
                    break
                decision = self.policy.choose(self._clock(), self._views(), starved=starved)
                match decision:
                    case Run(cast_id):
                        await self._step(self._active[cast_id])
                    case Sleep(seconds):
                        await self._sleep(seconds)
                    case Idle():  # look up now and then: deferred jobs, a side task's death
                        await self._sleep(self._heartbeat_s)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self._thread.close()
        await self._announce("stopped")
        log.info("worker %s stopped", self.id)

    # -- side tasks ---------------------------------------------------------------------

    async def _intake(self) -> None:
        """Long-poll `jobs` from the read offset; queue each job in order."""
        while True:
            if len(self._pending) >= _MAX_PENDING:
                await asyncio.sleep(0.5)
                continue
            batch = await self._store.read(JOBS, self._read_offset, max_records=_JOBS_PAGE, wait=30)
            for record in batch.records:
                self._watermark.add(record.seq_num)
                try:
                    job = decode(record.body, Job)
                except msgspec.DecodeError:
                    log.warning("jobs[%d] is not a job; skipped", record.seq_num)
                    self._watermark.finish(record.seq_num)
                    continue
                self._pending.append(_Job(record.seq_num, job.id))
            if batch.records:
                self._read_offset = batch.records[-1].seq_num + 1
                self._wake.set()

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self._heartbeat_s)
            await self._announce("heartbeat")

    async def _keep_leases(self) -> None:
        """Renew the lease of each active cast that appended nothing for a third of it."""
        period = self._lease_s / 3
        while True:
            await asyncio.sleep(period / 2)
            for cast in list(self._active.values()):
                if self._active.get(cast.id) is cast and self._clock() - cast.renewed >= period:
                    await self._renew(cast)

    async def _renew(self, cast: _Cast) -> None:
        async with cast.lease_lock:
            if self._active.get(cast.id) is not cast:
                return  # it ended (or was lost) meanwhile: a renewal now would outlive it
            sent = self._clock()
            lease = Lease(cast.attempt, self.id, self._lease_ms)
            await self._store.append(lease_stream(cast.id), [AppendRecord(encode(lease))])
            cast.renewed = max(cast.renewed, sent)
            cast.lease_records += 1

    async def _release(self, cast: _Cast) -> None:
        """Drop the renewals of a finished cast (nobody needs them once it ended): this
        worker's, or an earlier owner's (a cast past its first attempt may have some). The
        cast is no longer active, so a renewal waiting on the lock writes nothing after."""
        async with cast.lease_lock:
            if cast.lease_records or cast.attempt > 1:
                await self._store.delete(lease_stream(cast.id))
                cast.lease_records = 0

    @property
    def _lease_ms(self) -> int:
        return round(self._lease_s * 1000)

    async def _wake_on_stop(self) -> None:
        await self._stop.wait()
        self._wake.set()

    async def _announce(self, kind: str) -> None:
        """Append a notice to this worker's stream. Every notice but `stopped` names the chunk
        in flight; the stream starts over with `ready` after `ROTATE_NOTICES` of them."""
        stream = worker_stream(self.id)
        ack = await self._store.append(stream, [self._notice(kind)])
        if ack.next_seq >= ROTATE_NOTICES and kind != "stopped":
            await self._store.delete(stream)
            await self._store.append(stream, [self._notice("ready")])

    def _notice(self, kind: str) -> AppendRecord:
        inflight = self._inflight if kind != "stopped" else None
        notice = WorkerNotice(
            kind=kind,
            worker=self.id,
            time_ms=_now_ms(),
            voices=list(self._engine.voices.installed) if kind == "ready" else [],
            device=self._engine.device,
            pid=os.getpid(),
            heartbeat_ms=round(self._heartbeat_s * 1000),
            cast=inflight[0] if inflight else "",
            chunk=inflight[1] if inflight else -1,
            unspeakable=self.unspeakable if kind == "ready" else {},
            device_name=self._telemetry.device_name if self._telemetry else "",
            telemetry=self._telemetry.reading() if self._telemetry and kind != "stopped" else None,
        )
        return AppendRecord(encode(notice))

    async def _sleep(self, seconds: float | None) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)

    # -- intake and admission -----------------------------------------------------------

    async def _admit(self) -> bool:
        """Admit waiting jobs while the policy allows; True if one waits for capacity."""
        await self._recheck_foreign()
        await self._commit()
        while self._pending and not self._stop.is_set():
            if self._max_active is not None and len(self._active) >= self._max_active:
                return False
            job = self._pending[0]
            admitted = await self._consider(job)
            if admitted is None:
                return True
            self._pending.popleft()
        return False

    async def _consider(self, job: _Job) -> bool | None:
        """Start `job`'s cast, or settle the job otherwise; None: it must wait for room.

        The cast is read once when its job reaches the head of the line, and again only when
        there is room for it (it may have been started or ended by another worker meanwhile),
        not on every turn of the loop while it waits.
        """
        if job.id in self._active:  # a duplicate job: the cast is being made
            await self._finish(job)
            return False
        waited = self._waiting_state is not None and self._waiting_state[0] == job.offset
        if waited:
            assert self._waiting_state is not None
            state = self._waiting_state[1]
        else:
            state = await self._settle(job)
            if state is None:
                return False
        assert state.meta is not None
        candidate = Candidate(
            job.id, self.times.audio_for_chars(state.meta.text_chars, state.meta.speed)
        )
        now, views = self._clock(), self._views()
        if not self.policy.admit(now, views, candidate, rtf=self.times.rtf):
            self._waiting_state = (job.offset, state)
            return None
        self._waiting_state = None
        if waited:
            fresh = await self._settle(job)
            if fresh is None:
                return False
            state = fresh
        share = self.policy.share(now, views, candidate)
        await self._begin(
            job, state, plan_timing(self.times, share=share, quantum_s=self._quantum_s)
        )
        return True

    async def _settle(self, job: _Job) -> CastState | None:
        """The cast's state if it is ours to start; None if its job was settled otherwise
        (finished: no cast, ended, unreadable; or deferred: another owner holds its lease)."""
        state = await read_cast(self._store, job.id)
        if state.tail == 0 or state.terminal or state.meta is None:
            if state.tail and state.meta is None:
                log.warning("cast %s has no readable meta; its job is skipped", job.id)
            await self._finish(job)
            return None
        owner = state.latest.worker if state.latest is not None else None
        if owner not in (None, self.id) and await lease_held(
            self._store, job.id, state, now_ms=_now_ms()
        ):
            self._defer(job, state.tail)
            return None
        return state

    def _defer(self, job: _Job, tail: int) -> None:
        """Leave `job` to the worker holding its cast (looked at again every recheck)."""
        self._foreign[job.offset] = job
        self._foreign_seen[job.offset] = (tail, self._clock())

    async def _begin(self, job: _Job, state: CastState, timing: PlanTiming) -> None:
        latest = state.latest
        attempt = latest.attempt if latest is not None else 0
        failures = latest.failures if latest is not None else 0
        if latest is not None and await self._died_on(job.id, latest.worker, state.progress):
            failures += 1
            log.warning(
                "cast %s: worker %s died making its chunk %d (failure %d; %d allowed)",
                job.id,
                latest.worker,
                state.progress,
                failures,
                self._retries,
            )
            if failures > self._retries:
                message = f"the worker died {failures} times synthesizing chunk {state.progress}"
                await self._give_up(job, state.tail, attempt, message)
                return
        attempt += 1
        try:
            recipe = await self._recipe(job.id)
        except (IndexError, msgspec.DecodeError):
            await self._give_up(job, state.tail, attempt, "the cast has no readable recipe")
            return
        # A later attempt plans for the timing of the first, so its chunks (and audio) match.
        if latest is not None and latest.rtf is not None:
            timing = PlanTiming(latest.rtf, latest.overhead_s, latest.max_chunk_s)
        chunk_policy = timing.apply(self._chunk_policy)
        try:
            chunks = list(
                await self._thread.call(
                    self._engine.plan,
                    recipe.text,
                    recipe.voice,
                    chunk_policy.with_speed(recipe.speed),
                )
            )
            encoder = self._encoders(recipe.format, self._engine.sample_rate)
        except Exception as exc:
            log.warning("cast %s cannot be planned: %s", job.id, exc)
            await self._give_up(job, state.tail, attempt, f"the text could not be planned: {exc}")
            return
        start = _start_of(attempt, self.id, max(len(chunks), 1), timing, failures, self._lease_ms)
        sent = self._clock()
        try:
            ack = await self._store.append(
                cast_stream(job.id), [start_record(start)], match_seq_num=state.tail
            )
        except SeqMismatch as lost:
            self._defer(job, lost.next_seq)
            return
        cast = _Cast(
            job=job,
            recipe=recipe,
            chunks=chunks,
            timing=timing,
            attempt=attempt,
            start_seq=ack.start_seq,
            next_seq=ack.next_seq,
            encoder=encoder,
            failures=failures,
            renewed=sent,
        )
        log.info(
            "cast %s: attempt %d, %d chunks, planned for %s", job.id, attempt, len(chunks), timing
        )
        if chunks:
            self._active[job.id] = cast
        else:
            await self._finish_empty(cast)

    async def _died_on(self, cast_id: str, owner: str, progress: int) -> bool:
        """Whether the (dead) worker `owner` died rendering audio record `progress` of
        `cast_id`: its last notice named that chunk as in flight."""
        if owner == self.id:
            notice = self._previous_life
        else:
            found = await last_notice(self._store, owner)
            notice = found[1] if found else None
        return notice is not None and (notice.cast, notice.chunk) == (cast_id, progress)

    async def _recipe(self, cast_id: str) -> Recipe:
        batch = await self._store.read(catalog_stream(cast_id), 0, max_records=1)
        return decode(batch.records[0].body, Recipe)

    async def _recheck_foreign(self) -> None:
        """Every heartbeat (or half lease): finish foreign jobs whose cast ended; take over the
        rest once their owner's lease ran out.

        A cast whose tail moved since the last look has a live owner (one read tells whether
        it ended); only one that stood still for a whole lease is read in full for its lease.
        """
        every = min(self._heartbeat_s, self._lease_s / 2)
        if not self._foreign or self._clock() - self._foreign_checked < every:
            return
        self._foreign_checked = self._clock()
        back: list[_Job] = []
        jobs = sorted(self._foreign.items())
        limit = asyncio.Semaphore(_LOOKUPS)

        async def tail_of(job: _Job) -> int:
            async with limit:
                return await self._store.check_tail(cast_stream(job.id))

        tails = await asyncio.gather(*(tail_of(job) for _, job in jobs))
        for (offset, job), tail in zip(jobs, tails, strict=True):
            seen_tail, seen_at = self._foreign_seen.get(offset, (-1, 0.0))
            if tail != seen_tail:
                self._foreign_seen[offset] = (tail, self._clock())
                if tail and not await self._ended(job.id, tail):
                    continue  # its owner is at work
            elif self._clock() - seen_at < self._lease_s:
                continue  # still, but not for long enough for its lease to have run out
            state = await read_cast(self._store, job.id)
            if state.tail == 0 or state.terminal:
                self._drop_foreign(offset)
                await self._finish(job)
                continue
            if not await lease_held(self._store, job.id, state, now_ms=_now_ms()):
                self._drop_foreign(offset)
                back.append(job)
        self._pending.extendleft(reversed(back))

    def _drop_foreign(self, offset: int) -> None:
        del self._foreign[offset]
        self._foreign_seen.pop(offset, None)

    async def _ended(self, cast_id: str, tail: int) -> bool:
        """Whether the cast's record at `tail - 1` is its terminal one."""
        try:
            batch = await self._store.read(cast_stream(cast_id), tail - 1, max_records=1)
        except SeqOutOfRange:
            return False
        return bool(batch.records) and event_of(batch.records[0]) in (Event.EOS, Event.ERROR)

    # -- one chunk ----------------------------------------------------------------------

    def _views(self) -> list[CastView]:
        views = []
        for cast in self._active.values():
            chunks = []
            for chunk in cast.chunks[cast.next_chunk :]:
                audio = self.times.audio_s(len(chunk.phonemes), cast.recipe.speed)
                chunks.append((audio, self.times.gen_s(audio)))
            views.append(
                CastView(
                    id=cast.id,
                    order=cast.job.offset,
                    first_audio_s=cast.first_audio_s if cast.records else None,
                    audio_s=cast.samples / self._engine.sample_rate,
                    chunks=tuple(chunks),
                )
            )
        return views

    def _render(self, cast: _Cast, chunk: ChunkLike, last: bool) -> _Rendered:
        """On the engine thread: synthesize one chunk and encode it, record by record."""
        begun = time.perf_counter()
        try:
            synthesis = self._engine.synthesize(
                chunk, cast.recipe.voice, cast.recipe.speed, seed=chunk_seed(cast.id, chunk.index)
            )
            pcm = np.asarray(synthesis.pcm, dtype=np.float32).reshape(-1)
        except Exception as exc:
            raise _ChunkFailed(exc, encoder_intact=True) from exc
        limit = int(MAX_RECORD_S * self._engine.sample_rate)
        parts = max(1, math.ceil(pcm.size / limit))
        pieces = np.array_split(pcm, parts)
        try:
            encoded = [
                (p.size, cast.encoder.encode(p, final=last and i == parts - 1))
                for i, p in enumerate(pieces)
            ]
        except Exception as exc:
            raise _ChunkFailed(exc, encoder_intact=False) from exc
        words = getattr(synthesis, "words", ())  # engines without timings have none
        unit = getattr(synthesis, "unit", "")
        return _Rendered(encoded, time.perf_counter() - begun, words, unit)

    async def _await_chunk(self, future: concurrent.futures.Future[_Rendered]) -> _Rendered | None:
        """The rendered chunk; None if the worker is stopping and it did not finish in grace."""
        wrapped = asyncio.wrap_future(future)
        stopping = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({wrapped, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if not wrapped.done():
            done, _ = await asyncio.wait({wrapped}, timeout=self._stop_grace_s)
            if not done:
                wrapped.add_done_callback(lambda f: f.cancelled() or f.exception())
                return None
        return wrapped.result()

    async def _step(self, cast: _Cast) -> None:
        if self._clock() - cast.renewed >= self._lease_s / 2:
            await self._renew(cast)  # the side task fell behind: never render on a lapsing lease
        chunk = cast.chunks[cast.next_chunk]
        last = cast.next_chunk == len(cast.chunks) - 1
        # Say which chunk is in flight first: should it kill the process, the next life of
        # this worker (or whoever takes the cast over) knows which cast to blame.
        self._inflight = (cast.id, cast.records)
        await self._announce("heartbeat")
        try:
            rendered = await self._await_chunk(self._thread.submit(self._render, cast, chunk, last))
        except _ChunkFailed as failed:
            await self._chunk_failed(cast, chunk, failed)
            return
        finally:
            self._inflight = None
        if rendered is None:
            log.info("cast %s: chunk %d abandoned on stop", cast.id, chunk.index)
            return
        rate = self._engine.sample_rate
        more = len(cast.chunks) - cast.next_chunk - 1  # plan chunks after this one
        samples = cast.samples
        records = []
        for n, (size, body) in enumerate(rendered.pieces):
            begin_ms = samples * 1000 // rate
            begin = samples - cast.samples  # where this record starts in the chunk's PCM
            samples += size
            duration_ms = samples * 1000 // rate - begin_ms
            final = n == len(rendered.pieces) - 1
            words = record_words(
                rendered.words, begin, begin + size, duration_ms, rate, final=final
            )
            audio = AudioChunk(
                attempt=cast.attempt,
                index=cast.records + n,
                planned=cast.records + len(rendered.pieces) + more,
                offset_ms=begin_ms,
                duration_ms=duration_ms,
                text=chunk.text if n == 0 else "",
                body=body,
                words=words,
                unit=rendered.unit,
            )
            records.append(audio_record(audio))
        eos = None
        if last:
            gen_ms = round((cast.gen_s + rendered.gen_s) * 1000)
            eos = Eos(
                chunks=cast.records + len(records), audio_ms=samples * 1000 // rate, gen_ms=gen_ms
            )
            records.append(eos_record(cast.attempt, eos))
        if not await self._append(cast, records):
            return
        self.times.observe(
            units=len(chunk.phonemes),
            chars=len(chunk.text),
            speed=cast.recipe.speed,
            gen_s=rendered.gen_s,
            audio_s=(samples - cast.samples) / rate,
        )
        if self._telemetry is not None:
            self._telemetry.audio_made((samples - cast.samples) / rate)
        if cast.first_audio_s is None:
            cast.first_audio_s = self._clock()
        cast.samples = samples
        cast.records += len(rendered.pieces)
        cast.gen_s += rendered.gen_s
        cast.next_chunk += 1
        if eos is not None:
            await self._done(cast, eos)

    async def _append(self, cast: _Cast, records: list[AppendRecord]) -> bool:
        """Append to the cast's stream where this worker expects; False (and the cast is
        dropped) if another worker has taken it over."""
        for batch in _batches(records):
            sent = self._clock()
            try:
                ack = await self._store.append(cast.stream, batch, match_seq_num=cast.next_seq)
            except SeqMismatch as lost:
                log.warning("cast %s was taken over by another worker; dropping it", cast.id)
                self._active.pop(cast.id, None)
                self._defer(cast.job, lost.next_seq)
                return False
            cast.next_seq = ack.next_seq
            cast.renewed = max(cast.renewed, sent)
        return True

    async def _done(self, cast: _Cast, eos: Eos) -> None:
        self._active.pop(cast.id, None)
        await self._release(cast)
        receipt = Receipt(
            id=cast.id,
            attempt=cast.attempt,
            worker=self.id,
            chunks=eos.chunks,
            audio_ms=eos.audio_ms,
            gen_ms=eos.gen_ms,
            xrt=round(eos.audio_ms / max(eos.gen_ms, 1), 3),
        )
        await self._store.append(PROGRESS_DONE, [AppendRecord(encode(receipt))])
        log.info("cast %s done: %d ms of audio in %d ms", cast.id, eos.audio_ms, eos.gen_ms)
        await self._finish(cast.job)

    async def _finish_empty(self, cast: _Cast) -> None:
        body = await self._thread.call(
            lambda: cast.encoder.encode(np.zeros(0, dtype=np.float32), final=True)
        )
        chunk = AudioChunk(cast.attempt, 0, 1, 0, 0, "", body)
        eos = Eos(chunks=1, audio_ms=0, gen_ms=0)
        if await self._append(cast, [audio_record(chunk), eos_record(cast.attempt, eos)]):
            await self._done(cast, eos)

    # -- failures -----------------------------------------------------------------------

    async def _chunk_failed(self, cast: _Cast, chunk: ChunkLike, failed: _ChunkFailed) -> None:
        log.warning(
            "cast %s: chunk %d failed in attempt %d: %r",
            cast.id,
            chunk.index,
            cast.attempt,
            failed.cause,
        )
        count = cast.failures + 1
        if count > self._retries:
            self._active.pop(cast.id, None)
            message = f"chunk {chunk.index} failed {count} times: {failed}"
            await self._give_up(cast.job, cast.next_seq, cast.attempt, message)
            await self._release(cast)
            return
        cast.failures = count
        await self._new_attempt(cast, keep=failed.encoder_intact)

    async def _new_attempt(self, cast: _Cast, *, keep: bool) -> None:
        """Open attempt n+1. With `keep`, it re-appends this attempt's audio so far (the same
        bytes a fresh attempt would make) and goes on from the failed chunk; else it starts
        over with a fresh encoder."""
        copies: list[AppendRecord] = []
        if keep:
            seq = cast.start_seq + 1
            while seq < cast.next_seq:
                batch = await self._store.read(
                    cast.stream, seq, max_records=min(cast.next_seq - seq, MAX_BATCH_RECORDS)
                )
                for record in batch.records:
                    if record.seq_num < cast.next_seq:
                        copies.append(_relabel(record.headers, record.body, cast.attempt + 1))
                seq = batch.records[-1].seq_num + 1
        else:
            cast.encoder = self._encoders(cast.recipe.format, self._engine.sample_rate)
            cast.next_chunk = 0
            cast.records = 0
            cast.samples = 0
        cast.attempt += 1
        start = _start_of(
            cast.attempt, self.id, len(cast.chunks), cast.timing, cast.failures, self._lease_ms
        )
        start_seq = cast.next_seq
        if await self._append(cast, [start_record(start), *copies]):
            cast.start_seq = start_seq
            log.info("cast %s: attempt %d from chunk %d", cast.id, cast.attempt, cast.next_chunk)

    async def _give_up(self, job: _Job, seq: int, attempt: int, message: str) -> None:
        """End the cast with a terminal `error`, send its job to `jobs/dead`, finish it."""
        log.error("cast %s failed for good: %s", job.id, message)
        failure = Failure(message=message, attempts=max(attempt, 1))
        try:
            await self._store.append(
                cast_stream(job.id), [error_record(attempt, failure)], match_seq_num=seq
            )
        except SeqMismatch as lost:
            self._defer(job, lost.next_seq)
            return
        dead = DeadJob(id=job.id, error=message, attempts=max(attempt, 1))
        await self._store.append(JOBS_DEAD, [AppendRecord(encode(dead))])
        await self._finish(job)

    # -- the cursor ---------------------------------------------------------------------

    async def _finish(self, job: _Job) -> None:
        self._watermark.finish(job.offset)
        await self._commit()

    async def _commit(self) -> None:
        """Move the committed cursor up to the watermark (never backwards, even when other
        workers commit too)."""
        target = self._watermark.committed
        while target > self._committed:
            try:
                await self._store.append(
                    JOBS_CURSOR,
                    [AppendRecord(encode(Cursor(target)))],
                    match_seq_num=self._cursor_tail,
                )
            except SeqMismatch as exc:
                self._cursor_tail = exc.next_seq
                self._committed = max(self._committed, await committed_offset(self._store))
                continue
            self._cursor_tail += 1
            self._committed = target


def _start_of(
    attempt: int, worker: str, chunks: int, timing: PlanTiming, failures: int, lease_ms: int
) -> Start:
    return Start(
        attempt=attempt,
        worker=worker,
        chunks=chunks,
        rtf=timing.rtf,
        failures=failures,
        lease_ms=lease_ms,
        overhead_s=timing.overhead_s,
        max_chunk_s=timing.max_chunk_s,
    )


def _relabel(headers: tuple[tuple[bytes, bytes], ...], body: bytes, attempt: int) -> AppendRecord:
    value = str(attempt).encode()
    return AppendRecord(body, tuple((k, value if k == H_ATTEMPT else v) for k, v in headers))


def _batches(records: list[AppendRecord]) -> list[list[AppendRecord]]:
    """Split `records` into appends within the store's batch limits."""
    batches: list[list[AppendRecord]] = []
    current: list[AppendRecord] = []
    size = 0
    for record in records:
        weight = len(record.body) + sum(len(k) + len(v) for k, v in record.headers)
        if current and (len(current) >= MAX_BATCH_RECORDS or size + weight > MAX_BATCH_BYTES):
            batches.append(current)
            current, size = [], 0
        current.append(record)
        size += weight
    if current:
        batches.append(current)
    return batches
