"""The queue limit counts casts that are waiting or being made, and a queued cast's status
says its place in line and when it should start."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from litestar.testing import AsyncTestClient

from speechd import casts
from speechd.api.app import create_app
from speechd.config import Settings
from speechd.durable import AppendRecord, Store
from tests.api.test_errors import assert_error
from tests.api.test_health import announce


async def start(store: Store, cast_id: str) -> None:
    start = casts.Start(attempt=1, worker="w1", chunks=2)
    await store.append(casts.cast_stream(cast_id), [casts.start_record(start)])


async def finish(store: Store, cast_id: str) -> None:
    await start(store, cast_id)
    eos = casts.Eos(chunks=1, audio_ms=1500, gen_ms=30)
    await store.append(casts.cast_stream(cast_id), [casts.eos_record(1, eos)])


async def test_a_long_cast_at_the_head_of_the_line_does_not_fill_the_queue(
    store_dir: Path, store: Store
) -> None:
    await announce(store)  # a worker that says it is ready; the test plays its part
    settings = Settings(data_dir=str(store_dir), max_queue=3)
    async with AsyncTestClient(create_app(settings)) as client:
        ids = []
        for text in ("A very long chapter.", "Short one.", "Short two."):
            response = await client.post("/v1/casts", json={"input": text})
            assert response.status_code == 201, response.text
            ids.append(response.json()["id"])
        refused = await client.post("/v1/casts", json={"input": "Short three."})
        assert_error(refused, 429, type="rate_limit_exceeded", code="queue_full")
        # The long one is being made and holds the cursor at 0; the two behind it finished.
        await start(store, ids[0])
        for cast_id in ids[1:]:
            await finish(store, cast_id)
        deadline = time.monotonic() + 10  # what was looked at is cached half a second
        while (
            response := await client.post("/v1/casts", json={"input": "Short three."})
        ).status_code == 429:
            assert time.monotonic() < deadline, "finished casts still fill the queue"
            await asyncio.sleep(0.1)
        assert response.status_code == 201, response.text
        assert await store.check_tail(casts.JOBS) - await cursor(store) == 4


async def test_a_failed_cast_made_again_takes_a_place_in_line_like_a_new_one(
    store_dir: Path, store: Store
) -> None:
    await announce(store)
    settings = Settings(data_dir=str(store_dir), max_queue=2)
    async with AsyncTestClient(create_app(settings)) as client:
        failed = (await client.post("/v1/casts", json={"input": "One."})).json()["id"]
        await client.post("/v1/casts", json={"input": "Two."})
        await start(store, failed)
        failure = casts.Failure(message="the engine failed", attempts=1)
        await store.append(casts.cast_stream(failed), [casts.error_record(1, failure)])
        deadline = time.monotonic() + 10  # what was looked at is cached half a second
        while (
            response := await client.post("/v1/casts", json={"input": "Three."})
        ).status_code == 429:
            assert time.monotonic() < deadline, "a failed cast still counts as waiting"
            await asyncio.sleep(0.1)
        assert response.status_code == 201, response.text
        # Two wait now: asking for the failed one again would make a third.
        again = await client.post("/v1/casts", json={"input": "One."})
        assert_error(again, 429, type="rate_limit_exceeded", code="queue_full")
        assert (await store.check_tail(casts.cast_stream(failed))) == 3  # no retry appended


async def cursor(store: Store) -> int:
    tail = await store.check_tail(casts.JOBS_CURSOR)
    if tail == 0:
        return 0
    batch = await store.read(casts.JOBS_CURSOR, tail - 1)
    return casts.decode(batch.records[0].body, casts.Cursor).offset


async def test_a_queued_cast_shows_its_place_in_line_and_estimated_start(
    settings: Settings, store: Store
) -> None:
    await announce(store)
    receipt = casts.Receipt(
        id="x", attempt=1, worker="w1", chunks=1, audio_ms=1000, gen_ms=500, xrt=2.0
    )
    await store.append(casts.PROGRESS_DONE, [AppendRecord(casts.encode(receipt))])
    async with AsyncTestClient(create_app(settings)) as client:
        ids = []
        for text in ("Being made now.", "First in line.", "Second in line."):
            ids.append((await client.post("/v1/casts", json={"input": text})).json()["id"])
        await start(store, ids[0])
        await asyncio.sleep(0.6)  # past the cached look at the line
        views = [(await client.get(f"/v1/casts/{cast_id}")).json() for cast_id in ids]
    assert [v["status"] for v in views] == ["generating", "queued", "queued"]
    progress = [v["progress"] for v in views]
    assert progress[0]["queue_position"] is None and progress[0]["starts_in_seconds"] is None
    assert [p["queue_position"] for p in progress[1:]] == [0, 1]
    first, second = (p["starts_in_seconds"] for p in progress[1:])
    # The one being made holds its slot for its audio (about a second, from its text); each
    # cast in line after it for its own.
    assert 0 < first < second < 10
