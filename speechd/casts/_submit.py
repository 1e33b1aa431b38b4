"""Submitting a cast: claims instead of locks
(`docs/design/index.md#the-contract-streams-and-records`).

Claim `catalog/<id>` with the recipe, claim `pub/casts/<id>` with `meta`, append a job. Whoever
wins the `pub/casts` claim enqueues; everybody else gets the existing cast. A process that dies
between its claim and its job append would leave a cast that never starts; a later identical
submit heals that once the cast has sat without a `start` for `STALE_QUEUED_S`: it claims the
look with a `Requeue` record at the catalog's tail (one caller wins), and appends a job only
if none waits in `jobs` above the committed cursor. A cast that is merely waiting its turn in a
long line keeps its one job, however many callers ask for it: each look costs one read of the
waiting jobs and one append, at most once per `STALE_QUEUED_S` per cast.

A cast left without a maker (a cancelled book's chapter: started, stopped after a chunk, its
job finished) is healed the same way: once its stream has been quiet for `STALE_QUEUED_S` and
no job for it waits, a later identical submit appends one, and the new attempt keeps the audio
made so far.

A cast that ended in `error` is made again by the same request: it claims the remake with a
`retry` record, appended only at the error's tail (so one request wins), then appends a job;
the worker opens a new attempt that keeps the audio that can continue. A `retry` left without
its job (the process died in between) is healed like a stuck cast. `eos` is final.

Retention (`_retention`) may judge the cast gone while the same request makes it again (a
retry, or a new `pub/casts/<id>` after the sweep removed the old one), and it removes the
streams it judged, each only if nothing was appended to it since. So before a job is
appended for a recipe this call did not write itself, a `Requeue` record (`appended`) goes at
the catalog's tail, conditional on the tail just read: the sweep then spares the catalog, or
it had removed it already and the recipe is written again. A worker never takes a job whose
recipe is gone.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import msgspec

from speechd.durable import AppendRecord, SeqMismatch, SeqOutOfRange, Store

from ._jobs import waiting_jobs
from ._playable import read_head
from ._records import (
    Event,
    Job,
    Meta,
    Recipe,
    Requeue,
    Retry,
    decode,
    encode,
    meta_record,
    retry_record,
)
from ._streams import JOBS, cast_stream, catalog_stream

__all__ = ["STALE_QUEUED_S", "Submission", "submit"]

STALE_QUEUED_S = 120.0
_KEEP_TRIES = 8  # catalog appends raced by other callers before giving up on the look


class Submission(msgspec.Struct, frozen=True):
    id: str
    created: bool
    retried: bool = False  # an existing cast that had failed is being made again


async def submit(
    store: Store,
    cast_id: str,
    recipe: Recipe,
    *,
    sample_rate: int,
    at_once: bool = False,
    background: bool = False,
    book: str = "",
    clock: Callable[[], float] = time.time,
) -> Submission:
    """Create the cast `cast_id` from `recipe` unless it exists; either way name it.

    `at_once`: the caller wants its first audio at once; `background`: it is made with the
    device's spare time, for the book `book` (see `Job`). They ride on the job this call
    appends (creating the cast, or making a failed one again); a call that joins an existing
    cast changes nothing. `clock`: now, in seconds since the epoch (how long a waiting cast
    has waited is judged by it against the store's timestamps)."""
    job = AppendRecord(encode(Job(cast_id, at_once=at_once, background=background, book=book)))
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
    wrote = True
    try:
        await store.append(catalog_stream(cast_id), [AppendRecord(encode(recipe))], match_seq_num=0)
    except SeqMismatch:
        wrote = False
    now_ms = int(clock() * 1000)
    try:
        await store.append(cast_stream(cast_id), [meta_record(meta)], match_seq_num=0)
    except SeqMismatch:
        retried = await _heal(store, cast_id, recipe, job=job, now_ms=now_ms)
        return Submission(cast_id, created=False, retried=retried)
    if not wrote:
        await _keep_recipe(store, cast_id, recipe, now_ms=now_ms)
    await store.append(JOBS, [job])
    return Submission(cast_id, created=True)


async def _keep_recipe(store: Store, cast_id: str, recipe: Recipe, *, now_ms: int) -> None:
    """Before a job for a recipe someone else wrote: touch the catalog at its tail, or write
    the recipe again if it is gone (see the module docstring)."""
    catalog = catalog_stream(cast_id)
    look = AppendRecord(encode(Requeue(requested_ms=now_ms, appended=True)))
    for _ in range(_KEEP_TRIES):
        tail = await store.check_tail(catalog)
        record = look if tail else AppendRecord(encode(recipe))
        try:
            await store.append(catalog, [record], match_seq_num=tail)
        except SeqMismatch:  # another caller appended, or the sweep removed it: again
            continue
        return


async def _heal(
    store: Store, cast_id: str, recipe: Recipe, *, job: AppendRecord, now_ms: int
) -> bool:
    """Make a failed cast again, or enqueue a stuck or abandoned one again (with `job`); True
    if this call retried it."""
    head = await read_head(store, cast_id)
    if head.event == Event.ERROR:
        retry = Retry(attempt=head.attempt, requested_ms=now_ms)
        with contextlib.suppress(SeqMismatch):  # another request retried it first
            await store.append(
                cast_stream(cast_id),
                [retry_record(retry, head.start_seq)],
                match_seq_num=head.tail,
            )
            await _keep_recipe(store, cast_id, recipe, now_ms=now_ms)
            await store.append(JOBS, [job])
            return True
        return False
    unended = (Event.RETRY, Event.START, Event.AUDIO)
    if head.last is not None and (head.tail == 1 or head.event in unended):
        await _requeue(store, cast_id, job, quiet_since=head.last.timestamp, now_ms=now_ms)
    return False


async def _requeue(
    store: Store, cast_id: str, job: AppendRecord, *, quiet_since: int, now_ms: int
) -> None:
    """Append a job for a waiting cast that has none (see the module docstring)."""
    catalog = catalog_stream(cast_id)
    tail = await store.check_tail(catalog)
    if tail == 0:  # no recipe (removed meanwhile): nothing could make it
        return
    with contextlib.suppress(SeqOutOfRange):
        last = await store.read(catalog, tail - 1, max_records=1)
        if last.records:
            quiet_since = max(quiet_since, last.records[0].timestamp)
        if last.records and tail > 1:  # a look, by its caller's clock (the one we judge by)
            with contextlib.suppress(msgspec.DecodeError):
                quiet_since = max(quiet_since, decode(last.records[0].body, Requeue).requested_ms)
    if now_ms - quiet_since <= STALE_QUEUED_S * 1000:
        return
    in_line = cast_id in await waiting_jobs(store)
    look = Requeue(requested_ms=now_ms, appended=not in_line)
    try:
        await store.append(catalog, [AppendRecord(encode(look))], match_seq_num=tail)
    except SeqMismatch:  # another caller looked first
        return
    if not in_line:
        await store.append(JOBS, [job])
