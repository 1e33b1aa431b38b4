"""Submitting (`casts.submit`): one job per waiting cast, however many callers ask for it and
however long it waits; a cast whose creator died before enqueuing it gets exactly one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from speechd.casts import submit
from speechd.casts._records import Requeue, meta_record
from speechd.casts._submit import STALE_QUEUED_S
from speechd.casts.schema import JOBS, Job, Recipe, cast_stream, catalog_stream, decode, encode
from speechd.casts.schema import Meta as CastMeta
from speechd.durable import AppendRecord, Store
from tests.support.streams import read_stream

CID = "QQQQQQQQQQQQQQQQQQQQQQ"
RECIPE = Recipe("Hello there.", "kokoro", "af_heart", 1.0, "mp3", "Hello", 0)


def later(seconds: float) -> Callable[[], float]:
    """A clock that reads `seconds` past now (the store's timestamps stay real)."""
    at = time.time() + seconds
    return lambda: at


async def jobs_of(store: Store) -> list[str]:
    return [decode(r.body, Job).id for r in await read_stream(store, JOBS)]


async def test_a_cast_waiting_long_in_line_keeps_one_job(store: Store) -> None:
    made = await submit(store, CID, RECIPE, sample_rate=24_000)
    assert made.created and await jobs_of(store) == [CID]
    for wait in (STALE_QUEUED_S + 1, STALE_QUEUED_S * 3):
        at = later(wait)
        joined = await asyncio.gather(
            *(submit(store, CID, RECIPE, sample_rate=24_000, clock=at) for _ in range(50))
        )
        assert not any(s.created or s.retried for s in joined)
        assert await jobs_of(store) == [CID]
    # Each look is a claimed record in the catalog, after the recipe; none appended a job.
    looks = (await read_stream(store, catalog_stream(CID)))[1:]
    assert looks and not any(decode(r.body, Requeue).appended for r in looks)


async def test_a_cast_left_without_its_job_gets_exactly_one(store: Store) -> None:
    # The creator claimed the recipe and the meta, then died before appending the job.
    await store.append(catalog_stream(CID), [AppendRecord(encode(RECIPE))], match_seq_num=0)
    meta = CastMeta("kokoro", "af_heart", 1.0, "mp3", 24_000, "Hello", 0, 12)
    await store.append(cast_stream(CID), [meta_record(meta)], match_seq_num=0)
    # Not before it has waited STALE_QUEUED_S (its creator may still be appending it).
    await submit(store, CID, RECIPE, sample_rate=24_000)
    assert await jobs_of(store) == []
    at = later(STALE_QUEUED_S + 1)
    await asyncio.gather(
        *(submit(store, CID, RECIPE, sample_rate=24_000, clock=at) for _ in range(20))
    )
    assert await jobs_of(store) == [CID]
    at = later(STALE_QUEUED_S * 3)  # waiting on: that job is in line, no second one
    await asyncio.gather(
        *(submit(store, CID, RECIPE, sample_rate=24_000, clock=at) for _ in range(20))
    )
    assert await jobs_of(store) == [CID]
