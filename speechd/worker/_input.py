"""Following a live cast's input (`input/<id>`, layout in `speechd.casts._input`).

One `follow_input` task per admitted live cast long-polls its input stream from seq 0 (a new
attempt reads it all again: its planner, resumed at a position, skips the text before it),
queues each piece on the cast's plan (`CastPlan.pending`) and wakes the loop, which feeds the
planner between engine calls. The end record closes the plan's input.

**Who closes an idle input: the worker that follows it.** When nothing has come for the
recipe's `idle_s` (by the store's timestamps: the last record's, or the cast's creation), the
follower appends the end record (reason `idle`) conditionally at the tail it read; a piece that
landed meanwhile wins and the wait starts again. The api applies the same rule to a late
append, so an input is closed on time whichever process is running, and either may restart:
the rule is read from the records and the recipe, never from memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable

from speechd.casts import close_input, idle_expired, read_input_state
from speechd.casts.schema import InputEnd, Recipe, input_event, input_stream
from speechd.durable import Store

from ._cast import Admitted
from ._plan import CastPlan

__all__ = ["Followers", "follow_input"]

log = logging.getLogger("speechd.worker")

_LONG_POLL_S = 30.0
_PAGE = 500


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


async def follow_input(
    store: Store,
    cast_id: str,
    recipe: Recipe,
    plan: CastPlan,
    wake: asyncio.Event,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Queue the input's pieces on `plan` as they land, from the plan's `input_seq` on (0 for
    a new plan), until its end; close it when it stays idle past the recipe's `idle_s`."""
    stream = input_stream(cast_id)
    while True:
        last_ms = plan.input_last_ms or recipe.created_ms
        wait = _LONG_POLL_S
        if recipe.idle_s > 0:
            wait = min(wait, max((last_ms + recipe.idle_s * 1000 - _now_ms()) / 1000, 0.0))
        batch = await store.read(stream, plan.input_seq, max_records=_PAGE, wait=wait)
        for record in batch.records:
            event = input_event(record)
            if isinstance(event, InputEnd):
                plan.pending_close = True
                plan.last_input_s = clock()
                wake.set()
                log.info("cast %s: input closed (%s)", cast_id, event.reason)
                return
            plan.pending.append(event)
        if batch.records:
            plan.input_seq = batch.records[-1].seq_num + 1
            plan.input_last_ms = batch.records[-1].timestamp
            plan.last_input_s = clock()
            wake.set()
            continue
        state = await read_input_state(store, cast_id)
        now_ms = _now_ms()
        expired = idle_expired(
            state, opened_ms=recipe.created_ms, idle_s=recipe.idle_s, now_ms=now_ms
        )
        # Conditional at the tail we read: a piece that came meanwhile wins.
        if expired and await close_input(store, cast_id, state, "idle"):
            log.info("cast %s: input idle for %.0f s, closed", cast_id, recipe.idle_s)


class Followers:
    """One `follow_input` task per admitted live cast's plan (a plan made again, after a
    failure that starts the cast over, is followed from the input's start again)."""

    def __init__(self, store: Store, wake: asyncio.Event, clock: Callable[[], float]) -> None:
        self._store = store
        self._wake = wake
        self._clock = clock
        self._tasks: dict[str, tuple[CastPlan, asyncio.Task[None]]] = {}

    def sync(self, active: Iterable[Admitted]) -> None:
        """Follow the live casts in `active`, and no others."""
        casts = {cast.id: cast for cast in active}
        for cast_id in [i for i in self._tasks if i not in casts]:
            self._tasks.pop(cast_id)[1].cancel()
        for cast_id, cast in casts.items():
            if not cast.recipe.live:
                continue
            found = self._tasks.get(cast_id)
            if found is not None and found[0] is cast.plan and not found[1].done():
                continue
            if found is not None and found[1].done() and not found[1].cancelled():
                error = found[1].exception()
                if error is None and found[0] is cast.plan:
                    continue  # it read the input's end
                if error is not None:  # a store error: follow on from where it stopped
                    log.warning("cast %s: following its input failed: %r", cast_id, error)
            elif found is not None:
                found[1].cancel()  # a plan made again: it reads the input from its start
            task = asyncio.create_task(
                follow_input(self._store, cast_id, cast.recipe, cast.plan, self._wake, self._clock),
                name=f"speechd-worker-input-{cast_id}",
            )
            self._tasks[cast_id] = (cast.plan, task)

    async def close(self) -> None:
        for _, task in self._tasks.values():
            task.cancel()
        for _, task in list(self._tasks.values()):  # a copy: awaiting lets others run
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
