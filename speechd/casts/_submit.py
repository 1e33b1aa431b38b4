"""Submitting a cast: claims instead of locks (DESIGN.md §1).

Claim `catalog/<id>` with the recipe, claim `pub/casts/<id>` with `meta`, append a job. Whoever
wins the `pub/casts` claim enqueues; everybody else gets the existing cast. A process that dies
between its claim and its job append would leave a cast that never starts; a later identical
submit heals that by enqueuing again once the cast has sat without a `start` for
`STALE_QUEUED_S` (a duplicate job is harmless: the worker skips casts already active or done).

A cast that ended in `error` is made again by the same request: it claims the remake with a
`retry` record, appended only at the error's tail (so one request wins), then appends a job;
the worker opens a new attempt that keeps the audio that can continue. A `retry` left without
its job (the process died in between) is healed like a stuck cast. `eos` is final.
"""

from __future__ import annotations

import contextlib
import time

import msgspec

from speechd.durable import AppendRecord, SeqMismatch, Store

from ._playable import read_head
from ._records import Event, Job, Meta, Recipe, Retry, encode, meta_record, retry_record
from ._streams import JOBS, cast_stream, catalog_stream

__all__ = ["STALE_QUEUED_S", "Submission", "submit"]

STALE_QUEUED_S = 120.0


class Submission(msgspec.Struct, frozen=True):
    id: str
    created: bool
    retried: bool = False  # an existing cast that had failed is being made again


async def submit(
    store: Store, cast_id: str, recipe: Recipe, *, sample_rate: int, at_once: bool = False
) -> Submission:
    """Create the cast `cast_id` from `recipe` unless it exists; either way name it.

    `at_once`: the caller wants its first audio at once (see `Job`). It rides on the job this
    call appends (creating the cast, or making a failed one again); a call that joins an
    existing cast changes nothing."""
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
        retried = await _heal(store, cast_id, at_once=at_once)
        return Submission(cast_id, created=False, retried=retried)
    await store.append(JOBS, [AppendRecord(encode(Job(cast_id, at_once=at_once)))])
    return Submission(cast_id, created=True)


async def _heal(store: Store, cast_id: str, *, at_once: bool) -> bool:
    """Make a failed cast again, or enqueue a stuck one again; True if this call retried it."""
    head = await read_head(store, cast_id)
    now_ms = time.time() * 1000
    stale = head.last is not None and now_ms - head.last.timestamp > STALE_QUEUED_S * 1000
    if head.event == Event.ERROR:
        retry = Retry(attempt=head.attempt, requested_ms=int(now_ms))
        with contextlib.suppress(SeqMismatch):  # another request retried it first
            await store.append(
                cast_stream(cast_id),
                [retry_record(retry, head.start_seq)],
                match_seq_num=head.tail,
            )
            await store.append(JOBS, [AppendRecord(encode(Job(cast_id, at_once=at_once)))])
            return True
        return False
    if stale and (head.tail == 1 or head.event == Event.RETRY):
        await store.append(JOBS, [AppendRecord(encode(Job(cast_id)))])
    return False
