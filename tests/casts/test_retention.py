"""Retention of casts (`CastRetention` over the store's sweep): a cast's streams go together,
counted from the cast's last activity on any of them, and never while the cast is queued or
being made (its job waits in `jobs`)."""

from __future__ import annotations

import asyncio
import time

from speechd.casts import sweep_casts_forever
from speechd.casts._jobs import waiting_jobs
from speechd.casts._records import meta_record
from speechd.casts._retention import CAST_STREAM_PREFIXES, CastRetention
from speechd.casts._submit import submit
from speechd.casts.schema import (
    JOBS,
    JOBS_CURSOR,
    Cursor,
    Eos,
    Failure,
    Job,
    Meta,
    Recipe,
    Start,
    cast_stream,
    catalog_stream,
    decode,
    encode,
    eos_record,
    error_record,
    start_record,
)
from speechd.durable import AppendRecord, Store

AGE_S = 0.4
META = Meta("kokoro", "af_heart", 1.0, "mp3", 24_000, "t", 0, 10)


def ids(n: int) -> list[str]:
    return [f"{chr(ord('A') + i)}" * 22 for i in range(n)]


async def make(store: Store, cast_id: str, *, ended: bool, live: bool = False) -> None:
    """A cast's four streams (a live one's input too), as the api and a worker leave them."""
    await store.append("catalog/" + cast_id, [AppendRecord(b"{}")])
    records = [meta_record(META)]
    if ended:
        records += [start_record(Start(1, "w1", 1)), eos_record(1, Eos(0, 0, 0), 1)]
        await store.append("leases/" + cast_id, [AppendRecord(b"{}")])
    await store.append("pub/casts/" + cast_id, records)
    if live:
        await store.append("input/" + cast_id, [AppendRecord(b"piece")])


async def names(store: Store, cast_id: str) -> list[str]:
    return [p for p in CAST_STREAM_PREFIXES if await store.check_tail(p + cast_id)]


async def sweep(store: Store) -> int:
    retention = CastRetention(store, AGE_S)
    return await store.sweep(AGE_S, CAST_STREAM_PREFIXES, spare=retention.spare)


async def test_a_quiet_ended_cast_goes_whole(store: Store) -> None:
    (done,) = ids(1)
    await make(store, done, ended=True)
    await asyncio.sleep(AGE_S + 0.2)
    assert await sweep(store) == 3
    assert await names(store, done) == []


async def test_activity_on_any_stream_keeps_every_stream(store: Store) -> None:
    """A live cast whose recipe and meta were written long ago but whose input is arriving
    keeps its recipe: the api could not check its input token, the worker read its text."""
    live, leased = ids(2)
    await make(store, live, ended=False, live=True)
    await make(store, leased, ended=True)
    await asyncio.sleep(AGE_S + 0.2)
    await store.append("input/" + live, [AppendRecord(b"another piece")])
    await store.append("leases/" + leased, [AppendRecord(b"{}")])
    assert await sweep(store) == 0
    assert await names(store, live) == ["pub/casts/", "catalog/", "input/"]
    assert await names(store, leased) == ["pub/casts/", "catalog/", "leases/"]


async def test_a_cast_waiting_in_line_stays_however_long_it_waits(store: Store) -> None:
    queued, stuck, done = ids(3)
    for cast_id in (queued, stuck, done):
        await make(store, cast_id, ended=cast_id == done)
    # `stuck`'s job was finished (the cursor passed it) without it ending; `queued`'s and a
    # leftover duplicate of `done`'s wait above the cursor.
    await store.append(JOBS, [AppendRecord(encode(Job(stuck)))])
    await store.append(JOBS_CURSOR, [AppendRecord(encode(Cursor(1)))])
    await store.append(JOBS, [AppendRecord(encode(Job(queued))), AppendRecord(encode(Job(done)))])
    await asyncio.sleep(AGE_S + 0.2)
    assert await sweep(store) == 2 + 3
    assert await names(store, queued) == ["pub/casts/", "catalog/"]
    assert await names(store, stuck) == await names(store, done) == []


async def test_sweeping_forever_removes_casts_as_they_go_quiet(store: Store) -> None:
    done, queued = ids(2)
    await make(store, done, ended=True)
    await make(store, queued, ended=False)
    await store.append(JOBS, [AppendRecord(encode(Job(queued)))])
    sweeper = asyncio.ensure_future(sweep_casts_forever(store, AGE_S))
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if not await names(store, done):
                break
            await asyncio.sleep(0.05)
    finally:
        sweeper.cancel()
        await asyncio.gather(sweeper, return_exceptions=True)
    assert await names(store, done) == []
    assert await names(store, queued) == ["pub/casts/", "catalog/"]


async def test_a_cast_made_again_while_the_sweep_judges_it_keeps_its_recipe(
    store: Store,
) -> None:
    """The same request comes while the sweep's page that holds the cast's catalog is judged
    (the cast ended in error, and every stream of it is old): the request makes it again (a
    retry, or a new `pub/casts/<id>` where the sweep removed the old one), and the catalog
    it found must still hold the recipe when the worker takes the job."""
    cast_id = ids(1)[0]
    recipe = Recipe("Made again.", "kokoro", "af_heart", 1.0, "mp3", "Made again", 0)
    assert (await submit(store, cast_id, recipe, sample_rate=24_000)).created
    failure = Failure(message="the engine failed", attempts=1)
    await store.append(
        cast_stream(cast_id),
        [start_record(Start(1, "w1", 1)), error_record(1, failure)],
    )
    await store.append(JOBS_CURSOR, [AppendRecord(encode(Cursor(1)))])  # its job was taken
    await asyncio.sleep(AGE_S + 0.2)
    retention = CastRetention(store, AGE_S)
    again: list[bool] = []

    async def spare(names: list[str]) -> set[str]:
        kept = await retention.spare(names)  # judged gone ...
        if not again and any(n.startswith("catalog/") for n in names):
            made = await submit(store, cast_id, recipe, sample_rate=24_000)  # ... and made again
            again.append(made.created or made.retried)
        return kept

    await store.sweep(AGE_S, CAST_STREAM_PREFIXES, spare=spare)
    assert again == [True]
    first = await store.read(catalog_stream(cast_id), 0, max_records=1)
    assert first.records and decode(first.records[0].body, Recipe) == recipe
    assert cast_id in await waiting_jobs(store)
