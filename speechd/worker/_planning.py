"""Planning between chunk renders: every admitted cast's plan, a bounded slice at a time.

`Planning.run` is called by the loop before it picks the next chunk to render: it steps the
plans that are not ready (`CastPlan.wants_step`), one step per cast per round, in turn (the
rotation goes on where the last call stopped), until each is ready or waits for input, or
`slice_s` of planning has run. A step is itself bounded (the planner's contract: a slice of at
most a few thousand characters, one G2P segment, or one cut), so one call holds the engine
thread for about `slice_s` plus one step, whatever the texts: a cast of 200,000 hostile
characters costs the others that much per chunk they render, never its whole plan. When no
chunk is ready to render, the loop calls it again at once instead of sleeping.

`predictions` turns a ready cast's plan into what the scheduling policy reads: its planned
chunks, then the rest of its text as the planner estimates it, in chunks of the same size.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from ._cast import Admitted
from ._policy import ChunkTimes
from ._thread import EngineThread

__all__ = ["PLAN_SLICE_S", "Planning", "predictions"]

log = logging.getLogger("speechd.worker")

PLAN_SLICE_S = 0.05
"""Planning time the loop spends between two chunk renders (plus at most one step)."""
_REST_CHUNKS = 32  # the most estimated chunks the policy is shown for a cast's unplanned text


class Planning:
    def __init__(
        self,
        thread: EngineThread,
        clock: Callable[[], float],
        *,
        flush_s: float,
        slice_s: float = PLAN_SLICE_S,
    ) -> None:
        self._thread = thread
        self._clock = clock
        self.flush_s = flush_s
        self.slice_s = slice_s
        self._turn = 0

    def pending(self, casts: Sequence[Admitted]) -> bool:
        """Whether any plan would move with a step now."""
        now = self._clock()
        return any(c.plan.wants_step(now, self.flush_s) for c in casts)

    def next_flush(self, casts: Sequence[Admitted]) -> float | None:
        """Seconds until a live cast's waiting text is to be planned anyway (idle input)."""
        now = self._clock()
        due = [d for c in casts if (d := c.plan.flush_due(now, self.flush_s)) is not None]
        return min(due, default=None)

    async def run(self, casts: Sequence[Admitted]) -> list[tuple[Admitted, Exception]]:
        """Step the plans that need it for about `slice_s`; the casts whose text could not be
        planned, with why."""
        failed: list[tuple[Admitted, Exception]] = []
        began = self._clock()
        ordered = sorted(casts, key=lambda c: c.job.offset)
        while True:
            now = self._clock()
            todo = [c for c in ordered if c.plan.wants_step(now, self.flush_s)]
            todo = [c for c in todo if all(c is not f for f, _ in failed)]
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


def predictions(cast: Admitted, times: ChunkTimes) -> tuple[tuple[float, float], ...]:
    """(audio, generation) seconds predicted per chunk the cast has left: its planned chunks,
    then the planner's estimate of the rest of its text in chunks the size of its last."""
    speed = cast.recipe.speed
    chunks = []
    for planned in cast.plan.ahead:
        audio = times.audio_s(len(planned.chunk.phonemes), speed)
        chunks.append((audio, times.gen_s(audio)))
    rest = cast.plan.planner.audio_left_s
    if rest > 0 and chunks:
        size = max(chunks[-1][0], rest / _REST_CHUNKS, 1.0)
        while rest > 1e-6:
            audio = min(size, rest)
            chunks.append((audio, times.gen_s(audio)))
            rest -= audio
    return tuple(chunks)
