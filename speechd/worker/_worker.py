"""The cast worker's loop: admission, one chunk at a time, crash-safe progress.

In the manner of vLLM's busy loop: admit what the policy lets in (`_admission`), ask the
policy for one step (`Run` a chunk, `Sleep`, or stay `Idle`), do it, repeat. Everything that
changes the worker's state runs on this one loop; side tasks only read `jobs` (`_intake`),
beat the heart and renew the leases of active casts (`_ownership`). The engine runs on its
own thread, one call at a time (`_thread`); a chunk is rendered there (`_render`). Attempts
are opened, reopened and ended by `_attempts`, which keeps every durable chunk across attempts
(resume by reference) and counts failures per chunk.

Every cast is planned lazily (`_plan`, `_planning`): before each decision the loop steps the
plans that are not ready, a bounded slice in all, so the next chunk of each cast is known
(and whether it is the last) without any text being planned up front. Only casts whose next
chunk is planned are shown to the policy: a live cast waiting for text is neither run nor
late. A live cast's input is followed by a side task per cast (`_input`), which queues the
pieces for the planner, wakes the loop and closes an input left idle past its timeout.

Progress is durable and idempotent (see docs/design/index.md#the-worker):

* Jobs are read from the committed cursor on. A job whose cast ends in eos/error, or whose
  cast is already active here, is finished at once; one whose cast ends in `retry` (it failed
  and was asked for again) opens a new attempt. A cast whose latest attempt's owner still
  holds its lease is left to it, and looked at again every heartbeat (or half lease); once
  the lease ran out, it is taken over with a new attempt.
* Every cast record is appended with `match_seq_num` = the seq this worker expects next, and
  renews the lease. A failed condition means another worker took the cast over: it is dropped
  without writing more.
* A heartbeat naming the record in flight is written as each chunk starts, so whoever resumes
  the cast knows whether the last life died on it.
* The scheduler sees each cast on its listeners' clock (see `Admitted`): a cast resumed after
  a restart is as far behind as its listeners are.
* After the last chunk, `eos` (in the same append as the last audio), then a receipt in
  `progress/done`. The cursor moves only over a contiguous run of finished jobs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from speechd.casts import last_notice
from speechd.casts.schema import WORKERS_PREFIX, WorkerNotice, encode, worker_stream
from speechd.durable import AppendRecord, Store
from speechd.engine import Preempted, Stop  # torch-free

from ._admission import Admission
from ._attempts import Attempts, Fate
from ._batching import ALONE, BatchCosts, fill_batch
from ._cast import ActiveCasts, Admitted, Update
from ._config import WorkerConfig
from ._costs import ChunkTimes
from ._idle import ModelKeeper
from ._input import Followers
from ._intake import Intake
from ._ownership import Ownership
from ._plan import pause_s
from ._planning import Planning
from ._policy import ActiveCast, Idle, Policy, Run, Sleep, make_policy
from ._protocols import ChunkPolicyLike, EncoderFactory, EngineLike
from ._render import ChunkFailed, Rendered, measure_batches, render, render_batch, warm_up
from ._thread import EngineThread
from ._update import step_outcome

if TYPE_CHECKING:
    from speechd.telemetry import Telemetry

__all__ = ["ROTATE_NOTICES", "Worker"]

log = logging.getLogger("speechd.worker")

T = TypeVar("T")

ROTATE_NOTICES = 10_000  # a worker's stream starts over (with `ready`) after this many


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Worker:
    """One worker's loop over a store and an engine (both injected), run as `config` says
    (`WorkerConfig`: its `store` and `engine` are a worker process's to open and load; here
    they are given).

    `run_worker` builds one for the real process; tests build one with a cost-model engine.
    `policy` replaces the one `config` names (a test's, say), `times` the measurements the
    worker starts from, `clock` its monotonic clock. One step is in flight at a time: one
    chunk, or a batch of several casts' chunks (`_batching`) where `batch_costs` (measured by
    `warm_up` unless given) say batches save time.
    """

    def __init__(
        self,
        store: Store,
        engine: EngineLike,
        config: WorkerConfig,
        *,
        chunk_policy: ChunkPolicyLike,
        encoders: EncoderFactory,
        policy: Policy | None = None,
        times: ChunkTimes | None = None,
        clock: Callable[[], float] = time.monotonic,
        telemetry: Telemetry | None = None,
        batch_costs: BatchCosts | None = None,
    ) -> None:
        self.id = config.resolved_id()
        self.config = config
        self._telemetry = telemetry  # its readings ride on the notices; it counts our audio
        if policy is None:
            policy = make_policy(config.policy, comfortable_lead_s=config.comfortable_lead_s)
        self.policy = policy
        self.times = times if times is not None else ChunkTimes()
        self._store = store
        self._engine = engine
        self._chunk_policy = chunk_policy
        self._clock = clock
        self._thread = EngineThread()
        self._casts = ActiveCasts()
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._intake = Intake(store, self._wake)
        self._ownership = Ownership(
            store,
            self._intake,
            worker_id=self.id,
            lease_s=config.lease_s,
            heartbeat_s=config.heartbeat_s,
            clock=clock,
        )
        self._followers = Followers(store, self._wake, clock)
        self._planning = Planning(
            self._thread,
            clock,
            flush_s=config.flush_s,
            horizon_s=2 * config.quantum_s,
            sample_rate=engine.sample_rate,
        )
        self._attempts = Attempts(
            store,
            engine,
            self._thread,
            self._intake,
            self._ownership,
            worker_id=self.id,
            chunk_policy=chunk_policy,
            encoders=encoders,
            retries=config.retries,
            receipts=config.receipts,
            clock=clock,
        )
        self._admission = Admission(
            store,
            self._intake,
            self._ownership,
            self._attempts,
            policy=self.policy,
            times=self.times,
            sample_rate=engine.sample_rate,
            max_active=config.max_active,
            quantum_s=config.quantum_s,
            clock=clock,
            together=lambda n: self.batch_costs.together(n),
        )
        # The model given back after `idle_unload_s` with nothing to make, taken again for
        # the next chunk (`_idle`).
        self._model = ModelKeeper(
            engine,
            self._thread,
            after_s=config.idle_unload_s,
            announce=lambda: self._announce("heartbeat"),
            clock=clock,
            telemetry=telemetry,
        )
        # The per-item cost by batch size and the most items a batch holds (`--max-batch`):
        # measured by `warm_up` unless given; batch 1 until then.
        self.batch_costs = batch_costs if batch_costs is not None else ALONE
        self._measure_batches = batch_costs is None and config.max_batch != 1
        self._inflight: list[tuple[str, int]] = []  # (cast, audio record) being rendered
        # Language code -> why it cannot be spoken here; announced in `ready` (run_worker sets it).
        self.unspeakable: dict[str, str] = {}

    # -- public -------------------------------------------------------------------------

    @property
    def active(self) -> list[str]:
        """The casts admitted now, in line order (not those parked ahead of their turn for
        their first chunk: see `_admission`)."""
        return self._casts.in_line()

    @property
    def waiting(self) -> int:
        """Jobs read but not admitted yet."""
        return len(self._intake.pending)

    @property
    def deferred(self) -> int:
        """Jobs left to another live worker that owns their cast (looked at every heartbeat)."""
        return self._ownership.deferred

    async def warm_up(self, voice: str) -> None:
        """Synthesize a few chunks, short and long, once: the first listener meets a warm
        engine, and the first plan is made from measured costs rather than priors."""
        await self._thread.call(warm_up, self._engine, self._chunk_policy, voice, self.times)
        if self._measure_batches:  # `--max-batch auto|N`: what a batch saves here, if anything
            costs, limit = await self._thread.call(
                measure_batches, self._engine, self.config.max_batch
            )
            self.batch_costs = BatchCosts(costs or {1: 1.0}, limit)
            self._measure_batches = False

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
        await self._store.sweep(max(3600.0, 10 * self.config.heartbeat_s), [WORKERS_PREFIX])
        previous = await last_notice(self._store, self.id)
        self._attempts.last_words = previous[1] if previous else None  # this id's last run
        await self._store.delete(worker_stream(self.id))  # a previous life of this worker id
        committed = await self._intake.open()
        await self._announce("ready")
        log.info("worker %s ready; jobs from offset %d", self.id, committed)
        tasks = [
            asyncio.create_task(self._intake.run(), name="speechd-worker-intake"),
            asyncio.create_task(self._heartbeat(), name="speechd-worker-heartbeat"),
            asyncio.create_task(self._ownership.keep(self._casts), name="speechd-worker-leases"),
            asyncio.create_task(self._wake_on_stop(), name="speechd-worker-stop"),
        ]
        try:
            while not stop.is_set():
                for task in tasks:
                    if task.done():
                        task.result()  # a side task died: let its error end the worker
                self._wake.clear()
                admitted = await self._admission.admit(self._casts, stop)
                for cast in admitted.cancelled:  # a book cancelled: its chapters stop here
                    if cast.background:  # (unless a listener opened it meanwhile)
                        self._settle(cast, await self._attempts.abandon(cast))
                for cast in admitted.opened:
                    self._casts.add(cast)
                if stop.is_set():
                    break
                await self._plan_ahead()
                views = self._admission.views(self._casts)
                decision = self.policy.choose(self._clock(), views, starved=admitted.starved)
                match decision:
                    case Run(cast_id) if self._planning_for_listeners(cast_id):
                        continue  # a listener's next chunk is being planned: the book waits
                    case Run(cast_id):
                        await self._step([self._casts[c] for c in self._batch(cast_id, views)])
                    case Sleep(seconds):
                        await self._rest(seconds)
                    case Idle():  # look up now and then: deferred jobs, a side task's death
                        heartbeat, nothing = self.config.heartbeat_s, not self._casts
                        await self._rest(await self._model.idle(heartbeat, nothing=nothing))
        finally:
            await self._followers.close()
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self._thread.close()
        await self._announce("stopped")
        log.info("worker %s stopped", self.id)

    # -- side tasks and notices ---------------------------------------------------------

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat_s)
            await self._announce("heartbeat")

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
        inflight = self._inflight if kind != "stopped" else []
        notice = WorkerNotice(
            kind=kind,
            worker=self.id,
            time_ms=_now_ms(),
            voices=list(self._engine.voices.installed) if kind == "ready" else [],
            device=self._engine.device,
            pid=os.getpid(),
            heartbeat_ms=round(self.config.heartbeat_s * 1000),
            cast=inflight[0][0] if inflight else "",
            chunk=inflight[0][1] if inflight else -1,
            batch=list(inflight[1:]),
            max_batch=self.batch_costs.limit,
            graph=str(getattr(self._engine, "graph", "")),
            unspeakable=self.unspeakable if kind == "ready" else {},
            device_name=self._telemetry.device_name if self._telemetry else "",
            telemetry=self._telemetry.reading() if self._telemetry and kind != "stopped" else None,
            state=self._model.state if kind != "stopped" else "",
            fallback=self._model.fallback,
        )
        return AppendRecord(encode(notice))

    async def _sleep(self, seconds: float | None) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)

    # -- one chunk ----------------------------------------------------------------------

    async def _plan_ahead(self) -> None:
        """Follow the live casts' input, plan every cast a bounded slice ahead (but those
        parked in line after their first chunk: they are cut for their share once admitted),
        and end the casts whose plan is done without a chunk left to speak."""
        self._followers.sync(self._casts)
        self._admission.retime(self._casts)
        failed = await self._planning.run(self._casts.making())
        for cast, error in failed:
            self._settle(cast, await self._attempts.plan_failed(cast, error))
        for cast in [c for c in self._casts if c.plan.finished]:
            self._settle(cast, await self._attempts.end_file(cast))

    def _settle(self, cast: Admitted, fate: Fate) -> None:
        """Apply what became of `cast`: one no longer this worker's leaves the active casts."""
        if fate is not Fate.GOES_ON:
            self._casts.drop(cast)

    async def _rest(self, seconds: float) -> None:
        """Sleep as the policy says, unless planning has work to do (then go on at once);
        no longer than until a live cast's next chunk is due to be planned."""
        active = self._casts.making()
        if self._planning.pending(active):
            return
        due = self._planning.next_wake(active)
        await self._sleep(seconds if due is None else min(seconds, due))

    async def _await_chunk(
        self, future: concurrent.futures.Future[T], preempt: Stop | None = None
    ) -> T | None:
        """The rendered chunk (or batch); None if the worker is stopping and it did not
        finish in grace. With `preempt` (a background chunk's), a listener's job joining
        the line meanwhile sets it (`_preempt`)."""
        wrapped = asyncio.wrap_future(future)
        stopping = asyncio.ensure_future(self._stop.wait())
        watching = None if preempt is None else asyncio.ensure_future(self._preempt(preempt))
        try:
            await asyncio.wait({wrapped, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            if watching is not None:
                watching.cancel()
        if not wrapped.done():
            done, _ = await asyncio.wait({wrapped}, timeout=self.config.stop_grace_s)
            if not done:
                wrapped.add_done_callback(lambda f: f.cancelled() or f.exception())
                return None
        return wrapped.result()

    def _planning_for_listeners(self, cast_id: str) -> bool:
        """Whether `cast_id` is background work while a listener's plan has a step to make
        (a newcomer's first chunk not planned yet): a book's chunk started now would keep
        that listener waiting, as nothing stops it for a job already taken (`_preempt`)."""
        if not self._casts[cast_id].background:
            return False
        return self._planning.pending([c for c in self._casts.making() if not c.background])

    async def _preempt(self, stop: Stop) -> None:
        """Set `stop` once a listener's job joins the line (not a background one, nor one
        for a cast already made here): the book's chunk in flight gives way at once rather
        than keep the newcomer from its first audio for up to a quantum. That chunk is made
        again later; a book gets only the time nobody listening needs."""
        seen = {job.offset for job in self._intake.pending}
        while True:
            await self._wake.wait()
            self._wake.clear()  # the loop looks at everything again after the step anyway
            arrived = [job for job in self._intake.pending if job.offset not in seen]
            if any(job.id not in self._casts for job in arrived):
                stop.set()
                return
            seen.update(job.offset for job in arrived)

    def _batch(self, first: str, views: list[ActiveCast]) -> list[str]:
        """The casts whose next chunks are made with `first`'s (`fill_batch`); only `first`
        where batches save nothing here, or the policy is not the deadline one."""
        if self.batch_costs.limit <= 1 or self.policy.name != "deadline":
            return [first]
        # A cast whose attempt began with this chunk after a failure or a death is made
        # alone: a chunk that kills the process is then found by itself. A pause is never in
        # a batch: the engine does not make it.
        alone = [
            c.id
            for c in self._casts
            if (c.made == 0 and c.start.chunk_failures > 0)
            or (c.plan.ahead and pause_s(c.plan.ahead[0].chunk) is not None)
        ]
        # A listener's batch takes no background chunk (it would cost the listeners its
        # time), and a background one no listener's.
        background = self._casts[first].background
        views = [v for v in views if v.background == background]
        return fill_batch(
            self._clock(),
            views,
            first,
            self.batch_costs,
            quantum_s=self.config.quantum_s,
            comfortable_lead_s=self.config.comfortable_lead_s,
            alone=alone,
        )

    async def _step(self, casts: list[Admitted]) -> None:
        """Render the casts' next chunks (one, or a batch; a pause alone, written without the
        model, which is not taken again for it); work out what that does to each cast, as
        data (`step_outcome`); then apply it: the device's costs learn, the step's records go
        to the store together and each cast moves on by its own update, or its failed chunk
        alone is counted (`Attempts.land`)."""
        if any(c.plan.ahead and pause_s(c.plan.ahead[0].chunk) is None for c in casts):
            await self._model.ready()  # the model, taken again if it was given back
        for cast in casts:
            await self._ownership.renew_if_lapsing(cast)
        casts = [c for c in casts if not c.dropped]
        if not casts:
            return
        planned = [cast.plan.ahead[0] for cast in casts]
        # Say which records are in flight first: should they kill the process, the next life
        # of this worker (or whoever takes the casts over) knows which casts to blame.
        self._inflight = [(cast.id, cast.index) for cast in casts]
        await self._announce("heartbeat")
        outcomes: list[Rendered | ChunkFailed] | None
        try:
            if len(casts) == 1:
                cast, chunk = casts[0], planned[0].chunk
                # A book's chunk gives way to a listener who arrives while it is made.
                stop = Stop() if cast.background and pause_s(chunk) is None else None
                future = self._thread.submit(
                    render, self._engine, cast, chunk, cast.plan.last, stop
                )
                try:
                    rendered = await self._await_chunk(future, stop)
                    outcomes = None if rendered is None else [rendered]
                except ChunkFailed as failed:
                    outcomes = [failed]
                except Preempted:
                    log.info("cast %s: chunk %d stopped for a listener", cast.id, chunk.index)
                    return
            else:
                entries = [(c, p.chunk, c.plan.last) for c, p in zip(casts, planned, strict=True)]
                batch = self._thread.submit(render_batch, self._engine, entries)
                outcomes = await self._await_chunk(batch)
        finally:
            self._inflight = []
        if outcomes is None:
            for cast, p in zip(casts, planned, strict=True):
                log.info("cast %s: chunk %d abandoned on stop", cast.id, p.chunk.index)
            return
        if self._telemetry is not None:
            self._telemetry.batch_ran(len(casts))
        rate = self._engine.sample_rate
        step = step_outcome(
            casts, outcomes, times=self.times, batch_costs=self.batch_costs, sample_rate=rate
        )
        if log.isEnabledFor(logging.DEBUG):
            self._log_step(casts, step.updates)
        for learned in step.learned:
            self.times.learn(learned)
        fates = await self._attempts.land(casts, step.updates)
        for cast, fate in zip(casts, fates, strict=True):
            self._settle(cast, fate)
        if self._telemetry is not None:  # the audio this worker appended
            landed = zip(step.updates, fates, strict=True)
            made = sum(u.samples for u, f in landed if isinstance(u, Update) and f != Fate.LOST)
            self._telemetry.audio_made(made / rate)

    def _log_step(self, casts: list[Admitted], updates: list[Update | ChunkFailed]) -> None:
        """Each chunk made: the prediction it was scheduled on, and the truth."""
        rate, now = self._engine.sample_rate, self._clock()
        for cast, update in zip(casts, updates, strict=True):
            if not isinstance(update, Update) or update.planned is None:
                continue
            audio = self.times.audio_s(len(update.planned.chunk.phonemes), cast.recipe.speed)
            lead = cast.lead(now, rate)
            log.debug(
                "cast %s chunk %d: %.2f s of audio (predicted %.2f), %.2f s to make (predicted"
                " %.2f), its listener had %s s left",
                cast.id,
                update.planned.chunk.index,
                update.samples / rate,
                audio,
                update.gen_s,
                self.times.gen_s(audio),
                "-" if lead is None else f"{lead:.2f}",
            )
