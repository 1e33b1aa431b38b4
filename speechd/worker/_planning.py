"""Planning between chunk renders: every admitted cast's plan, a bounded slice at a time.

`Planning.run` is called by the loop before it picks the next chunk to render: it steps the
plans that are not ready (`CastPlan.wants_step`), one step per cast per round, in turn (the
rotation goes on where the last call stopped), until each is ready or waits for input, or
`slice_s` of planning has run; the listeners' plans before any background cast's (a book's),
which waits for a call in which no listener's plan needed a step. A step is itself bounded (the
planner's contract: a slice of at most a few thousand characters, one G2P segment, or one cut),
so one call holds the engine thread for about `slice_s` plus one step, whatever the texts: a
cast of 200,000 hostile characters costs the others that much per chunk they render, never its
whole plan. When no chunk is ready to render, the loop calls it again at once instead of
sleeping.

**A live cast's next chunk waits for its text** while its listener is well ahead: planned at
once, it would end wherever the text stopped arriving (a clause or two), and on a slow device
short chunks cost more compute per second of audio than the listener can spare. So once a live
cast has audio, its next chunk is planned only when its listener's lead drops to `horizon_s`
(about two quanta: time to make it) or a chunk's worth of text (`fill_chars`) is waiting; the
first chunk is planned at once, short, so first audio is fast.

`predictions` turns a ready cast's plan into what the scheduling policy reads: its planned
chunks, then the rest of its text as the planner estimates it, in chunks of the same size.
`whole_rest` is all of it, in the chunks the planner is expected to cut (`Planner.estimate`:
at the rest's sentence ends, as the chunker cuts): what the start hold is worked out from.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from ._cast import Admitted
from ._costs import ChunkTimes
from ._plan import pause_s
from ._protocols import ChunkLike
from ._thread import EngineThread

__all__ = ["PLAN_SLICE_S", "Planning", "predictions", "whole_rest"]

log = logging.getLogger("speechd.worker")

PLAN_SLICE_S = 0.05
"""Planning time the loop spends between two chunk renders (plus at most one step)."""
FILL_CHARS = 250
"""A live cast with this much text waiting plans its next chunk whatever its lead (about the
most one chunk holds)."""
_REST_CHUNKS = 32  # the most estimated chunks the policy is shown for a cast's unplanned text
_MAX_CHUNK_S = 16.0  # about the most audio a chunk holds (~250 tokens), when none is set


class Planning:
    def __init__(
        self,
        thread: EngineThread,
        clock: Callable[[], float],
        *,
        flush_s: float,
        horizon_s: float,
        sample_rate: int,
        slice_s: float = PLAN_SLICE_S,
        fill_chars: int = FILL_CHARS,
    ) -> None:
        self._thread = thread
        self._clock = clock
        self.flush_s = flush_s
        self.horizon_s = horizon_s
        self.slice_s = slice_s
        self.fill_chars = fill_chars
        self._rate = sample_rate
        self._turn = 0

    def _deferred_s(self, cast: Admitted, now: float) -> float | None:
        """How long a live cast's next chunk waits for more text (None: it does not)."""
        plan = cast.plan
        if not plan.open_input or plan.ahead or plan.waiting_chars >= self.fill_chars:
            return None
        lead = cast.lead(now, self._rate)
        if lead is None or lead <= self.horizon_s:
            return None
        return lead - self.horizon_s

    def _wants(self, cast: Admitted, now: float) -> bool:
        return cast.plan.wants_step(now, self.flush_s) and self._deferred_s(cast, now) is None

    def pending(self, casts: Sequence[Admitted]) -> bool:
        """Whether any plan would move with a step now."""
        now = self._clock()
        return any(self._wants(c, now) for c in casts)

    def next_wake(self, casts: Sequence[Admitted]) -> float | None:
        """Seconds until a plan is to be stepped without any input coming: a live cast's
        listener nearing the end of its audio, or its waiting text due to be spoken anyway
        (the input idle for `flush_s`). None: nothing is due."""
        now = self._clock()
        due = []
        for cast in casts:
            wait = self._deferred_s(cast, now)
            if wait is None:
                wait = cast.plan.flush_due(now, self.flush_s)
            if wait is not None:
                due.append(wait)
        return min(due, default=None)

    async def run(self, casts: Sequence[Admitted]) -> list[tuple[Admitted, Exception]]:
        """Step the plans that need it for about `slice_s`; the casts whose text could not be
        planned, with why."""
        failed: list[tuple[Admitted, Exception]] = []
        began = self._clock()
        ordered = sorted(casts, key=lambda c: c.job.offset)
        listened = False  # a listener's plan was stepped in this call
        while True:
            now = self._clock()
            todo = [c for c in ordered if self._wants(c, now)]
            todo = [c for c in todo if all(c is not f for f, _ in failed)]
            # The listeners' plans first: a book's planning never delays a listener's chunk.
            listeners = [c for c in todo if not c.background]
            if listeners:
                todo, listened = listeners, True
            elif listened:
                return failed
            if not todo:
                return failed
            start = self._turn % len(todo)
            for cast in todo[start:] + todo[:start]:
                self._turn += 1
                cast.plan.feed_pending()
                try:
                    await self._thread.call(cast.plan.step, self._clock(), self.flush_s)
                except Exception as exc:  # the planner's own: a text it cannot plan
                    failed.append((cast, exc))
                if self._clock() - began >= self.slice_s:
                    return failed


def _predicted(chunk: ChunkLike, speed: float, times: ChunkTimes) -> tuple[float, float]:
    """(audio, generation) seconds predicted for a planned chunk: a pause is its silence at
    no compute (the worker writes it; the device is not asked), speech is priced by its
    phonemes."""
    silence = pause_s(chunk)
    if silence is not None:
        return silence, 0.0
    audio = times.audio_s(len(chunk.phonemes), speed)
    return audio, times.gen_s(audio)


def predictions(cast: Admitted, times: ChunkTimes) -> tuple[tuple[float, float], ...]:
    """(audio, generation) seconds predicted per chunk the cast has left: its planned chunks,
    then the planner's estimate of the rest of its text in chunks of the most a chunk of the
    cast may hold (`PlanTiming.max_chunk_s`: chunks grow to it after the first two or three),
    the next `_REST_CHUNKS` of them: what falls due soonest, which is what scheduling and
    admission weigh. A cast with none planned yet is all estimate; a pause planned costs no
    compute (the estimate of the text not planned yet counts no pauses: it errs short)."""
    speed = cast.recipe.speed
    chunks = [_predicted(planned.chunk, speed, times) for planned in cast.plan.ahead]
    rest = cast.plan.planner.audio_left_s
    cap = cast.timing.max_chunk_s or _MAX_CHUNK_S
    size = max(cap, chunks[-1][0] if chunks else 0.0, 0.5)
    for _ in range(_REST_CHUNKS):
        if rest <= 1e-6:
            break
        audio = min(size, rest)
        chunks.append((audio, times.gen_s(audio)))
        rest -= audio
    return tuple(chunks)


def whole_rest(cast: Admitted, times: ChunkTimes) -> tuple[tuple[float, float], ...]:
    """(audio, generation) seconds predicted per chunk the cast has left, to its end: its
    planned chunks, then the chunks its planner expects the rest of its text to make
    (`Planner.estimate`: cut at its sentence ends within each budget), however many."""
    speed = cast.recipe.speed
    chunks = [_predicted(planned.chunk, speed, times) for planned in cast.plan.ahead]
    if not cast.plan.done:
        for tokens in cast.plan.planner.estimate():
            audio = times.audio_s(tokens, speed)
            chunks.append((audio, times.gen_s(audio)))
    return tuple(chunks)
