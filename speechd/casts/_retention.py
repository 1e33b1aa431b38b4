"""Retention of casts (`--retention`): a cast's streams live and go together.

A cast is four streams: `pub/casts/<id>`, `catalog/<id>` (the recipe), `leases/<id>` and a live
cast's `input/<id>`. Each on its own goes quiet at another time: the recipe is written once,
when the cast is made, and read by the worker whenever the cast starts, so a retention that
counted each stream's own age removed the recipe of a cast still queued, being made, or taking
live input (its worker then finds "no readable recipe", a restarted api answers its input 404).

So the sweep (the store's `sweep`, over those four prefixes) asks `CastRetention.spare` about
each page of expired streams, and spares every stream of a cast that is still alive:

* its newest record, over all four streams, is younger than the retention (its last
  activity: a record appended, a piece of input, a lease renewed); or
* it has not ended (its stream ends in neither `eos` nor `error`) and a job for it waits in
  `jobs` at or above the committed cursor: it is queued, or being made, however long that
  takes. Its activity when it ends then counts from there.

A cast whose streams are all older than the retention and that has ended, or has no job left
(nothing will ever make it), goes whole. A book's stream (`books/<id>`) goes once it has been
quiet for the retention, on its own: its chapters are casts, each kept or removed by these
rules (a chapter still waiting in the line is spared, as any cast with a job is). The store
checks and deletes each stream atomically, as it was when its page was listed, so a stream
appended to during a sweep survives it. A
request that makes the cast again while its page is judged (a retry, or a new `pub/casts/<id>`
after the old one went) appends to its catalog before its job (`_submit`), so the recipe the
worker reads is never removed under it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Final

from speechd.durable import Retention, SeqOutOfRange, Store, sweep_forever

from ._jobs import waiting_jobs
from ._records import Event, event_of
from ._streams import BOOKS_PREFIX, CAST_PREFIX, CATALOG_PREFIX, INPUT_PREFIX, LEASES_PREFIX

__all__ = ["CAST_STREAM_PREFIXES", "CastRetention", "sweep_casts_forever"]

CAST_STREAM_PREFIXES: Final = (CAST_PREFIX, CATALOG_PREFIX, LEASES_PREFIX, INPUT_PREFIX)
"""The streams of one cast: `<prefix><id>` for each."""

_LOOKUPS: Final = 16  # casts looked at at once


def _cast_of(name: str) -> str | None:
    for prefix in CAST_STREAM_PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix) :]
    return None


async def _last_record_ms(store: Store, stream: str) -> int | None:
    """When `stream` was last appended to (its last record's timestamp); None if missing."""
    tail = await store.check_tail(stream)
    if tail == 0:
        return None
    try:
        batch = await store.read(stream, tail - 1, max_records=1, bodies=False)
    except SeqOutOfRange:  # deleted or trimmed meanwhile: as good as quiet
        return None
    return batch.records[0].timestamp if batch.records else None


async def _ended(store: Store, cast_id: str) -> bool:
    """Whether the cast's stream ends in `eos` or `error` (a missing one counts as ended)."""
    stream = CAST_PREFIX + cast_id
    tail = await store.check_tail(stream)
    if tail == 0:
        return True
    try:
        batch = await store.read(stream, tail - 1, max_records=1, bodies=False)
    except SeqOutOfRange:
        return True
    return not batch.records or event_of(batch.records[0]) in (Event.EOS, Event.ERROR)


class CastRetention:
    """Removes casts whose every stream has been quiet for `max_age_s` and that nothing will
    make any more (see the module docstring). `retention` and `spare` are what the store's
    sweep takes; `sweep_casts_forever` runs it."""

    def __init__(
        self, store: Store, max_age_s: float, *, clock: Callable[[], float] = time.time
    ) -> None:
        self._store = store
        self.retention = Retention(max_age_s, (*CAST_STREAM_PREFIXES, BOOKS_PREFIX))
        self._clock = clock

    async def spare(self, names: list[str]) -> set[str]:
        """Those of the expired streams `names` whose cast is still alive."""
        cutoff = int((self._clock() - self.retention.max_age_s) * 1000)
        ids = {cast for cast in map(_cast_of, names) if cast}
        alive: set[str] = set()
        room = asyncio.Semaphore(_LOOKUPS)
        jobs_read = asyncio.Lock()
        waiting: set[str] | None = None

        async def in_line(cast_id: str) -> bool:
            nonlocal waiting
            async with jobs_read:  # `jobs` read once per page, and only when it matters
                if waiting is None:
                    waiting = await waiting_jobs(self._store)
            return cast_id in waiting

        async def _in_making(cast_id: str) -> bool:
            return not await _ended(self._store, cast_id) and await in_line(cast_id)

        async def look(cast_id: str) -> None:
            async with room:
                touched = await asyncio.gather(
                    *(_last_record_ms(self._store, p + cast_id) for p in CAST_STREAM_PREFIXES)
                )
                quiet = max((t for t in touched if t is not None), default=0) < cutoff
                if not quiet or await _in_making(cast_id):
                    alive.add(cast_id)

        await asyncio.gather(*(look(cast_id) for cast_id in sorted(ids)))
        return {name for name in names if _cast_of(name) in alive}


async def sweep_casts_forever(store: Store, max_age_s: float) -> None:
    """Remove casts past `max_age_s` (see the module docstring) until cancelled or the store
    closes, a sweep every `Retention.interval_s`."""
    retention = CastRetention(store, max_age_s)
    await sweep_forever(store, retention.retention, spare=retention.spare)
