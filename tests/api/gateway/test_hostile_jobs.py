"""One job per waiting cast, however many callers ask for it and however long it waits (issue
27 item 5): a cast that waited in line past `STALE_QUEUED_S` got another job from every
identical request, so `jobs` grew without `--max-queue` and new casts saw a queue full of
duplicates. The wait that makes a cast look stuck is cut from two minutes to a fraction of a
second here."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from speechd.api import create_app
from speechd.casts import CastState
from speechd.casts import _submit as casts_submit
from speechd.casts.schema import JOBS, Job, decode
from speechd.config import Settings
from speechd.durable import Store
from tests.api.gateway._support import (
    StepEngine,
    live_server,
    read_all,
    running_worker,
    status_when,
    submit,
)
from tests.support.streams import read_stream

STALE_S = 0.3


async def test_a_cast_waiting_in_line_keeps_one_job(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(casts_submit, "STALE_QUEUED_S", STALE_S)
    engine = StepEngine()
    engine.hold()
    app = create_app(Settings(data_dir="unused", max_queue=4), store=store)
    async with (
        running_worker(store, engine),
        live_server(app) as live,
        httpx.AsyncClient(base_url=live.url, timeout=30) as http,
    ):
        making = await submit(http, "The cast being made, slowly.", response_format="pcm")
        await status_when(store, making, lambda s: s.state == CastState.GENERATING)
        body = {"input": "The cast waiting its turn.", "response_format": "pcm"}
        waiting = await submit(http, body["input"], response_format="pcm")
        for _ in range(3):
            await asyncio.sleep(STALE_S * 1.5)
            answers = await asyncio.gather(*(http.post("/v1/casts", json=body) for _ in range(30)))
            assert {a.status_code for a in answers} == {200}
        jobs = [decode(r.body, Job).id for r in await read_stream(store, JOBS)]
        assert jobs.count(waiting) == 1 and jobs.count(making) == 1
        # New casts still find room in the line.
        others = [await submit(http, f"Another cast, {n}.") for n in range(2)]
        engine.run_free()
        for cast_id in (making, waiting, *others):
            await status_when(store, cast_id, lambda s: s.state == CastState.DONE)
        assert len(await read_all(store, waiting)) > 2
