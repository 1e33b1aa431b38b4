"""Submitting a cast: claims instead of locks (DESIGN.md §1).

Claim `catalog/<id>` with the recipe, claim `pub/casts/<id>` with `meta`, append a job. Whoever
wins the `pub/casts` claim enqueues; everybody else gets the existing cast. A process that dies
between its claim and its job append would leave a cast that never starts; a later identical
submit heals that by enqueuing again once the cast has sat without a `start` for
`STALE_QUEUED_S` (a duplicate job is harmless: the worker skips casts already active or done).
"""

from __future__ import annotations

import contextlib
import time

import msgspec

from speechd.durable import AppendRecord, SeqMismatch, Store

from ._records import Job, Meta, Recipe, encode, meta_record
from ._streams import JOBS, cast_stream, catalog_stream

__all__ = ["STALE_QUEUED_S", "Submission", "submit"]

STALE_QUEUED_S = 120.0


class Submission(msgspec.Struct, frozen=True):
    id: str
    created: bool


async def submit(store: Store, cast_id: str, recipe: Recipe, *, sample_rate: int) -> Submission:
    """Create the cast `cast_id` from `recipe` unless it exists; either way name it."""
    meta = Meta(
        model=recipe.model,
        voice=recipe.voice,
        speed=recipe.speed,
        format=recipe.format,
        sample_rate=sample_rate,
        title=recipe.title,
        created_ms=recipe.created_ms,
        text_chars=len(recipe.text),
        live=recipe.live,
    )
    # Same id, same content: a recipe someone else wrote first is as good as ours.
    with contextlib.suppress(SeqMismatch):
        await store.append(catalog_stream(cast_id), [AppendRecord(encode(recipe))], match_seq_num=0)
    try:
        await store.append(cast_stream(cast_id), [meta_record(meta)], match_seq_num=0)
    except SeqMismatch:
        await _heal_stuck(store, cast_id)
        return Submission(cast_id, created=False)
    await store.append(JOBS, [AppendRecord(encode(Job(cast_id)))])
    return Submission(cast_id, created=True)


async def _heal_stuck(store: Store, cast_id: str) -> None:
    batch = await store.read(cast_stream(cast_id), 0, max_records=2)
    if batch.tail != 1 or not batch.records:
        return
    if time.time() * 1000 - batch.records[0].timestamp > STALE_QUEUED_S * 1000:
        await store.append(JOBS, [AppendRecord(encode(Job(cast_id)))])
