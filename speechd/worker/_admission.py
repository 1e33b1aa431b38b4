"""Admission: which waiting jobs become active casts, and what each cast's chunks are cut to.

The worker's loop calls `Admission.admit` before each decision: jobs are taken from the head
of the line (`Intake.pending`) while the policy lets them in (`Policy.admit`, by capacity) and
`max_active` allows; each admitted cast is planned for its share of the device
(`Policy.share`) with its chunks capped to the quantum while it protects someone (`quantum`,
`chunk_quantum`). `retime` asks that rule again for every active cast before each planning
slice, and `views` is how the policy sees the active casts. It holds no casts: it is handed
the loop's active casts (`ActiveCasts`) and returns the casts it opened, for the loop to add.
The decisions are the policy's (pure), the reads and writes the intake's, the ownership's and
the attempts'.

**First audio at once, ahead of admission.** A job whose request wants its first audio at
once (`JobRef.at_once`, `start: now`) and whose cast has no audio yet is opened early when it
is among the first `ahead` jobs in line (`max_active`, or `AHEAD` without one) while it must
wait: its cast is *parked* (`Admitted.parked`). Until its first chunk is made it is shown to
the policy as any newcomer, whose first chunk goes first only while that costs no admitted
listener a stall it would not otherwise hear (`DeadlinePolicy.choose`); then it *waits*
(`Admitted.waits`: neither run nor counted by admission) at its place in line, and once the
admission rule lets it in by capacity it goes on from that audio, never made again. So on a
device slower than real time, where a cast waits whole for the one ahead of it to end, its
listener gets audio within about one chunk of the casts running (`chunk_quantum`) plus its
own first chunk, then waits at the live edge. At most `ahead` casts are parked at once, each
for one short chunk, so a flood of them cannot starve the admitted listeners.

**Background work** (a book's chapters: `JobRef.background`, in the intake's `background`
line) is admitted only when no job waits in `pending` (a listener's job always goes first,
waiting for capacity included), `BACKGROUND_ACTIVE` at a time, and takes no room: the policy
sees it only where no listener needs the device (`_policy`), its chunks always keep to the
quantum, and `max_active` does not count it. A foreground job for a cast being made in the
background (its listener opened the chapter) promotes it once the admission rule lets it in
as any newcomer: its listener's clock starts then, and its chunks not cut yet are planned for
its share of the device. A book's cancel (`Intake.cancels`) stops its background casts after
the chunk in flight (`Admitting.cancelled`, for the loop to drop: nothing is written into
them).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from speechd.casts import CastHead, read_head
from speechd.casts.schema import Event
from speechd.durable import Store

from ._attempts import Attempts
from ._cast import ActiveCasts, Admitted, JobRef
from ._costs import ChunkTimes, chunk_quantum, plan_timing
from ._intake import Intake
from ._ownership import Ownership
from ._planning import predictions
from ._policy import ActiveCast, Candidate, Policy

__all__ = ["AHEAD", "BACKGROUND_ACTIVE", "Admission", "Admitting"]

log = logging.getLogger("speechd.worker")

AHEAD = 4
"""Without `max_active`, how many of the first jobs in line may have their first chunk made
ahead of their admission (those that want it: `start: now`)."""

BACKGROUND_ACTIVE = 1
"""Background casts made at once: a book's chapters one after another, in order."""


@dataclass
class Admitting:
    """What one round of admission did: the casts it opened (for the loop to make active),
    and whether a job still waits in line for capacity."""

    opened: list[Admitted]
    starved: bool = False
    cancelled: list[Admitted] = field(default_factory=list)  # background casts of a cancelled book


class Admission:
    """Admission and chunk sizes over the worker's active casts (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        intake: Intake,
        ownership: Ownership,
        attempts: Attempts,
        *,
        policy: Policy,
        times: ChunkTimes,
        sample_rate: int,
        max_active: int | None,
        quantum_s: float,
        clock: Callable[[], float],
        together: Callable[[int], float] | None = None,
    ) -> None:
        self._store = store
        self._intake = intake
        self._ownership = ownership
        self._attempts = attempts
        self._policy = policy
        self._times = times
        self._rate = sample_rate
        self._max_active = max_active
        self._quantum_s = quantum_s
        self._clock = clock
        self._together = together  # what first chunks made in one batch cost (`Policy.admit`)
        self._ahead = max_active if max_active is not None else AHEAD
        # The head of the line's cast as read before it had to wait for room.
        self._waiting_head: tuple[int, CastHead] | None = None
        self._looked: set[int] = set()  # offsets of at-once jobs read for `_open_ahead`

    async def admit(self, casts: ActiveCasts, stop: asyncio.Event) -> Admitting:
        """Admit waiting jobs beside the active `casts` while the policy allows (until `stop`
        is set). Then open the at-once casts that wait early in line for their first chunk
        (see above). Every cast opened is in the result, none is added to `casts`."""
        intake = self._intake
        back = await self._ownership.recheck()
        for job in [j for j in back if intake.cancelled(j)]:
            await intake.finish(job)
        intake.pending.extendleft(reversed([j for j in back if not j.background]))
        intake.background.extendleft(
            reversed([j for j in back if j.background and not intake.cancelled(j)])
        )
        await intake.commit()
        done = Admitting([])
        for book, offset in intake.take_cancels():
            done.cancelled += [
                c for c in casts if c.background and c.job.book == book and c.job.offset < offset
            ]
        done.starved = await self._admit(casts, done.opened, stop)
        if intake.pending and not stop.is_set():
            await self._open_ahead(casts, done.opened)
        elif not done.starved:
            await self._admit_background(casts, done.opened, done.cancelled, stop)
        return done

    async def _admit(self, casts: ActiveCasts, opened: list[Admitted], stop: asyncio.Event) -> bool:
        pending = self._intake.pending
        while pending and not stop.is_set():
            admitted = casts.admitted + sum(1 for cast in opened if not cast.parked)
            if self._max_active is not None and admitted >= self._max_active:
                return False
            taken = await self._consider(pending[0], casts, opened)
            if taken is None:
                return True
            self._looked.discard(pending.popleft().offset)
        return False

    async def _admit_background(
        self,
        casts: ActiveCasts,
        opened: list[Admitted],
        cancelled: list[Admitted],
        stop: asyncio.Event,
    ) -> None:
        """Open the background line's casts while no job waits in `pending`, up to
        `BACKGROUND_ACTIVE` at a time, each planned within the quantum (see above)."""
        intake, line = self._intake, self._intake.background
        while line and not intake.pending and not stop.is_set():
            making = [c for c in [*casts, *opened] if c.background and c not in cancelled]
            if len(making) >= BACKGROUND_ACTIVE:
                return
            job = line.popleft()
            revived = next((c for c in cancelled if c.id == job.id), None)
            if revived is not None and not intake.cancelled(job):  # its book made again
                cancelled.remove(revived)  # read with the cancel: it just goes on
                await intake.finish(job)
                continue
            mine = job.id in casts or any(cast.id == job.id for cast in opened)
            if mine or intake.cancelled(job):  # made already (any priority), or not wanted
                await intake.finish(job)
                continue
            head = await self._settle(job)
            if head is None:
                continue
            quantum = chunk_quantum(self._times, quantum_s=self._quantum_s, protects=True)
            timing = plan_timing(self._times, quantum_s=quantum)
            cast = await self._attempts.open(job, head, timing)
            if cast is not None:
                cast.background = True
                opened.append(cast)
                log.info("cast %s: made in the background", job.id)

    async def _open_ahead(self, casts: ActiveCasts, opened: list[Admitted]) -> None:
        """Open the casts of the at-once jobs among the first `ahead` in line that have no
        audio yet, parked: each job is read once for it, and at most `ahead` casts are
        parked at a time."""
        parked = casts.parked + sum(1 for cast in opened if cast.parked)
        # A copy: the intake appends to the line while this awaits the store.
        for job in list(itertools.islice(self._intake.pending, self._ahead)):
            if parked >= self._ahead:
                return
            mine = job.id in casts or any(cast.id == job.id for cast in opened)
            if not job.at_once or mine or job.offset in self._looked:
                continue
            self._looked.add(job.offset)
            head = await read_head(self._store, job.id)
            fresh = head.start is None or head.event == Event.RETRY
            if head.meta is None or not fresh or head.audio_ms > 0:
                continue  # left to its turn in line (which settles whatever it is)
            policy, times = self._policy, self._times
            now, views = self._clock(), self.views([*casts, *opened], admission=True, ahead=False)
            whole = Candidate(job.id, times.audio_for_chars(head.meta.text_chars, head.meta.speed))
            share = policy.share(now, views, whole)
            quantum = self.quantum(now, views, job.id, None, share)
            timing = plan_timing(times, share=share, quantum_s=quantum)
            cast = await self._attempts.open(job, head, timing)
            if cast is not None:
                cast.parked = True
                opened.append(cast)
                parked += 1
                log.info("cast %s: its first chunk is made ahead of its turn in line", job.id)

    async def _consider(
        self, job: JobRef, casts: ActiveCasts, opened: list[Admitted]
    ) -> bool | None:
        """Start `job`'s cast, or settle the job otherwise; None: it must wait for room.

        The cast is read once when its job reaches the head of the line, and again only when
        there is room for it (it may have been started or ended by another worker meanwhile),
        not on every turn of the loop while it waits.
        """
        cast = casts.get(job.id) or next((c for c in opened if c.id == job.id), None)
        if cast is not None and cast.parked:
            return self._unpark(cast, [*casts, *opened])
        if cast is not None and cast.background:  # its listener opened it
            promoted = self._promote(cast, [*casts, *opened])
            if promoted:
                await self._intake.finish(job)  # the cast's own job ends with it
            return promoted
        if cast is not None:  # a duplicate job: the cast is being made
            await self._intake.finish(job)
            return False
        waited = self._waiting_head is not None and self._waiting_head[0] == job.offset
        if waited:
            assert self._waiting_head is not None
            head = self._waiting_head[1]
        else:
            found = await self._settle(job)
            if found is None:
                return False
            head = found
        assert head.meta is not None
        policy, times = self._policy, self._times
        whole = times.audio_for_chars(head.meta.text_chars, head.meta.speed)
        candidate = Candidate(job.id, max(whole - head.audio_ms / 1000, 0.0))
        now, views = self._clock(), self.views([*casts, *opened], admission=True, ahead=False)
        if not policy.admit(now, views, candidate, rtf=times.rtf, together=self._together):
            self._waiting_head = (job.offset, head)
            return None
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "cast %s admitted: %.1f s of audio predicted at rtf %.3f, beside %s",
                job.id,
                candidate.audio_s,
                times.rtf,
                [
                    (v.id[:6], round(v.lead(now) or 0.0, 2), round(v.remaining_audio_s, 1),
                     round(sum(g for _, g in v.chunks), 1))
                    for v in views
                ],
            )  # fmt: skip
        self._waiting_head = None
        if waited:
            fresh = await self._settle(job)
            if fresh is None:
                return False
            head = fresh
        share = policy.share(now, views, candidate)
        pending = self._intake.pending
        behind = Candidate(pending[1].id, 0.0) if len(pending) > 1 else None
        quantum = self.quantum(now, views, job.id, behind, share)
        timing = plan_timing(times, share=share, quantum_s=quantum)
        cast = await self._attempts.open(job, head, timing)
        if cast is not None:
            opened.append(cast)
        return True

    def _unpark(self, cast: Admitted, casts: list[Admitted]) -> bool | None:
        """Admit parked `cast` at the head of the line beside `casts` if the policy lets it
        in now (None: not yet): its chunks not cut yet are planned for its share of the
        device from here."""
        policy, times = self._policy, self._times
        made = cast.samples / self._rate
        whole = times.audio_for_chars(len(cast.recipe.text), cast.recipe.speed)
        candidate = Candidate(cast.id, max(whole - made, 0.0))
        now, views = self._clock(), self.views(casts, admission=True, ahead=False)
        if not policy.admit(now, views, candidate, rtf=times.rtf, together=self._together):
            return None
        share = policy.share(now, views, candidate)
        pending = self._intake.pending
        behind = Candidate(pending[1].id, 0.0) if len(pending) > 1 else None
        quantum = self.quantum(now, views, cast.id, behind, share)
        cast.parked = False
        cast.timing = plan_timing(times, share=share, quantum_s=quantum)
        cast.plan.quantum_s = quantum
        self._attempts.retime(cast, cast.timing)
        log.info("cast %s: admitted after its first chunk", cast.id)
        return True

    def _promote(self, cast: Admitted, casts: list[Admitted]) -> bool | None:
        """Make background `cast` a listener's if the policy lets it in beside `casts` now
        (None: not yet; it goes on in the background meanwhile): its listener starts now,
        from its first audio, and its chunks not cut yet are planned for its share."""
        policy, times = self._policy, self._times
        made = cast.samples / self._rate
        whole = times.audio_for_chars(len(cast.recipe.text), cast.recipe.speed)
        candidate = Candidate(cast.id, max(whole - made, 0.0))
        others = [c for c in casts if c is not cast]
        now, views = self._clock(), self.views(others, admission=True, ahead=False)
        if not policy.admit(now, views, candidate, rtf=times.rtf, together=self._together):
            return None
        share = policy.share(now, views, candidate)
        pending = self._intake.pending
        behind = Candidate(pending[1].id, 0.0) if len(pending) > 1 else None
        quantum = self.quantum(now, views, cast.id, behind, share)
        cast.promote(now, time.time_ns() // 1_000_000)
        cast.timing = plan_timing(times, share=share, quantum_s=quantum)
        cast.plan.quantum_s = quantum
        self._attempts.retime(cast, cast.timing)
        log.info("cast %s: a listener opened it; made at listener priority from now", cast.id)
        return True

    def quantum(
        self,
        now: float,
        views: list[ActiveCast],
        cast_id: str,
        waiting: Candidate | None,
        share: float,
        *,
        background: bool = False,
    ) -> float:
        """The most compute one chunk of cast `cast_id` may take (0: no cap but the token
        caps): the quantum while it protects someone (`Policy.protects`: another cast is
        active, or `waiting`, the next cast in line, could be let in beside it; always, for a
        `background` cast); otherwise past it (`chunk_quantum`: up to `MAX_LIFT` quanta)."""
        times = self._times
        protects = background or self._policy.protects(now, views, cast_id, waiting, rtf=times.rtf)
        return chunk_quantum(times, quantum_s=self._quantum_s, protects=protects, share=share)

    async def _settle(self, job: JobRef) -> CastHead | None:
        """The cast's head if it is ours to start; None if its job was settled otherwise
        (finished: no cast, ended, unreadable; or deferred: another owner holds its lease)."""
        head = await read_head(self._store, job.id)
        if head.tail == 0 or head.meta is None or head.event in (Event.EOS, Event.ERROR):
            if head.tail and head.meta is None:
                log.warning("cast %s has no readable meta; its job is skipped", job.id)
            await self._intake.finish(job)
            return None
        if await self._ownership.held_by_another(job, head):
            return None
        return head

    def views(
        self, casts: Iterable[Admitted], *, admission: bool = False, ahead: bool = True
    ) -> list[ActiveCast]:
        """The runnable `casts` as the policy sees them: those whose next chunk is planned. A
        live cast waiting for text is not among them, so it is neither run nor counted as
        missing a deadline (its listener waits at the live edge; when text comes, its clock
        goes on from there, see `Admitted.advance`).

        For `admission`, also the casts admitted but not planned that far yet, with the
        planner's estimate of their text: else a burst of casts would each be admitted
        before the one before it was planned, as if the device had nothing to do.

        A parked cast that waits in line after its first chunk is never among them; one
        still to make its first chunk is unless `ahead` is False (admission counts only what
        it admitted)."""
        times = self._times
        views = []
        for cast in casts:
            if cast.waits or (cast.parked and not ahead):
                continue
            plan = cast.plan
            if not (plan.ready or (admission and not plan.waiting and not plan.finished)):
                continue
            chunks = predictions(cast, times)
            if not chunks:
                continue
            views.append(
                ActiveCast(
                    id=cast.id,
                    order=cast.job.offset,
                    first_audio_s=cast.origin_s,
                    audio_s=cast.samples / self._rate,
                    chunks=chunks,
                    background=cast.background,
                )
            )
        return views

    def retime(self, casts: ActiveCasts) -> None:
        """Each cast's chunks not cut yet keep to the quantum while it protects someone and
        grow past it while it protects nobody (`quantum`): a newcomer's arrival (in line or
        admitted) brings the quantum back for them, and its end lifts it again
        (`Planner.retime`; the chunks already cut stay as they are). A cast parked for its
        first chunk is no reason to keep to it: it gets the device after the chunk in
        flight, before any chunk cut now."""
        now, views = self._clock(), self.views(casts, admission=True, ahead=False)
        pending = self._intake.pending
        waiting = Candidate(pending[0].id, 0.0) if pending else None
        times = self._times
        for cast in casts:
            plan = cast.plan
            if plan.done or cast.waits:
                continue  # nothing left to cut, or cut for its share once admitted
            share = cast.timing.share
            quantum = self.quantum(now, views, cast.id, waiting, share, background=cast.background)
            if quantum == plan.quantum_s:
                continue
            plan.quantum_s = quantum
            self._attempts.retime(cast, plan_timing(times, share=share, quantum_s=quantum))
