"""Caps on long-lived reads (issue 14): SSE, long-polls, live audio and waiting speech
requests hold a slot each, per client and in all; past a cap the answer is 429
(`too_many_streams`) or 503 (`server_busy`) in OpenAI's shape with `Retry-After`, before any
work; every slot comes back when its request ends, however it ends."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest

from speechd.api.app import create_app
from speechd.api.gateway import GatewaySettings
from speechd.casts import CastState, schema
from speechd.config import Settings
from speechd.durable import Store
from speechd.errors import ServerBusy, TooManyStreams
from speechd.limits import StreamSlots
from speechd.worker import Worker
from tests.api.gateway._support import (
    LiveServer,
    StepEngine,
    live_server,
    serve,
    status_when,
    submit,
    until,
)

CAPS = GatewaySettings(max_client_streams=2, max_streams=3, client_header="x-forwarded-for")


def who(name: str) -> dict[str, str]:
    return {"x-forwarded-for": {"a": "203.0.113.1", "b": "203.0.113.2", "c": "203.0.113.3"}[name]}


def assert_capped(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["retry-after"] == "5"
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code


@pytest.fixture
async def capped(store: Store, worker: Worker) -> AsyncIterator[LiveServer]:
    async with serve(store, gateway=CAPS) as live:
        yield live


@contextlib.asynccontextmanager
async def opened(
    http: httpx.AsyncClient, url: str, headers: dict[str, str]
) -> AsyncIterator[httpx.Response]:
    """A streaming GET whose headers have arrived, held open until the block ends."""
    async with http.stream("GET", url, headers=headers) as response:
        yield response


def test_the_slot_table_counts_per_client_and_in_all() -> None:
    slots = StreamSlots(total=3, per_client=2)
    a1, a2 = slots.acquire("a"), slots.acquire("a")
    with pytest.raises(TooManyStreams):
        slots.acquire("a")
    b1 = slots.acquire("b")
    with pytest.raises(ServerBusy):
        slots.acquire("c")
    assert (slots.in_use, slots.refused) == (3, {"client": 1, "total": 1})
    a1.release()
    a1.release()  # again: a no-op
    assert (slots.in_use, slots.held_by("a")) == (2, 1)
    c1 = slots.acquire("c")
    for slot in (a2, b1, c1):
        slot.release()
    assert slots.in_use == 0 and slots.held_by("a") == 0
    assert slots._held == {}  # a client with no slot takes no room


async def test_long_lived_reads_are_capped_per_client_and_in_all(
    store: Store, engine: StepEngine, capped: LiveServer
) -> None:
    engine.hold()
    slots = capped.gateway.slots
    async with (
        httpx.AsyncClient(base_url=capped.url, timeout=30) as http,
        contextlib.AsyncExitStack() as held,
    ):
        cast_id = await submit(http, "A cast held before its first chunk.")
        tail = (await status_when(store, cast_id, lambda s: s.attempt == 1)).attempt + 1
        events = f"/v1/casts/{cast_id}/events"
        # Client a: two SSE streams, its cap; a third is refused at once.
        for _ in range(2):
            sse = await held.enter_async_context(opened(http, events, who("a")))
            assert sse.status_code == 200
        assert_capped(await http.get(events, headers=who("a")), 429, "too_many_streams")
        # A read that does not wait is not long-lived: it is served.
        quick = await http.get(f"/v1/casts/{cast_id}/records", headers=who("a"))
        assert quick.status_code == 200
        # Client b: a long-poll at the tail takes the api's last slot.
        poll = asyncio.create_task(
            http.get(f"/v1/casts/{cast_id}/records?seq_num={tail}&wait=20", headers=who("b"))
        )
        await until(lambda: slots.in_use == 3)
        # Client c, below its own cap, finds the api full: live audio and speech get 503,
        # and the refused speech request made no cast.
        audio = await http.get(f"/v1/casts/{cast_id}/audio", headers=who("c"))
        assert_capped(audio, 503, "server_busy")
        speech = await http.post(
            "/v1/audio/speech", json={"input": "Never submitted."}, headers=who("c")
        )
        assert_capped(speech, 503, "server_busy")
        assert len(await store.list(schema.CAST_PREFIX)) == 1
        # One of a's streams ends: its slot is back, and c's live audio is served.
        await held.aclose()
        await until(lambda: slots.in_use == 1)
        async with opened(http, f"/v1/casts/{cast_id}/audio", who("c")) as live:
            assert live.status_code == 200
            assert live.headers["x-cast-status"] == "generating"
            assert slots.in_use == 2
        engine.allow(1)
        assert (await poll).status_code == 200
        engine.run_free()
    await until(lambda: slots.in_use == 0)
    assert slots.refused == {"client": 1, "total": 2}


async def test_a_speech_request_holds_its_slot_until_its_answer_ends(
    engine: StepEngine, capped: LiveServer
) -> None:
    engine.hold()
    slots = capped.gateway.slots
    client = "203.0.113.1"
    async with httpx.AsyncClient(base_url=capped.url, timeout=30) as http:
        other = await submit(http, "Another cast, to ask for its events.")
        body = {"input": "One two three. Four five six seven.", "response_format": "pcm"}

        async def speak(stream: bool) -> httpx.Response:
            return await http.post(
                "/v1/audio/speech", json={**body, "stream": stream}, headers=who("a")
            )

        # Two requests wait for the same cast's first audio: a's cap is full meanwhile.
        waiting = [asyncio.create_task(speak(False)), asyncio.create_task(speak(True))]
        await until(lambda: slots.held_by(client) == 2)
        refused = await http.get(f"/v1/casts/{other}/events", headers=who("a"))
        assert_capped(refused, 429, "too_many_streams")
        engine.run_free()
        for response in await asyncio.gather(*waiting):
            assert response.status_code == 200 and response.content
    await until(lambda: slots.in_use == 0)


async def test_a_client_that_goes_away_gives_its_slot_back(
    store: Store, engine: StepEngine, capped: LiveServer
) -> None:
    engine.hold()
    slots = capped.gateway.slots
    async with httpx.AsyncClient(base_url=capped.url, timeout=30) as http:
        cast_id = await submit(http, "A cast held before its first chunk.")
        await status_when(store, cast_id, lambda s: s.state == CastState.GENERATING)
        for _ in range(3):  # more than the cap, one after another
            async with opened(http, f"/v1/casts/{cast_id}/events", who("a")) as sse:
                assert sse.status_code == 200
                await until(lambda: slots.in_use == 1)
            # The client closed the connection mid-stream.
            await until(lambda: slots.in_use == 0)
        engine.run_free()


async def test_the_api_counts_its_reads_in_a_slot_table_another_door_shares(
    store: Store, engine: StepEngine, worker: Worker
) -> None:
    # Under `speechd serve` the Wyoming door holds slots of the same table: what it holds,
    # the api cannot hand out.
    shared = StreamSlots(total=2, per_client=2)
    other_door = [shared.acquire("wyoming 198.51.100.7"), shared.acquire("wyoming 198.51.100.8")]
    app = create_app(Settings(data_dir="unused"), store=store, gateway=CAPS, slots=shared)
    engine.hold()
    async with live_server(app) as live, httpx.AsyncClient(base_url=live.url, timeout=30) as http:
        cast_id = await submit(http, "A cast held before its first chunk.")
        await status_when(store, cast_id, lambda s: s.state == CastState.GENERATING)
        events = f"/v1/casts/{cast_id}/events"
        assert_capped(await http.get(events, headers=who("a")), 503, "server_busy")
        other_door[0].release()
        async with opened(http, events, who("a")) as sse:
            assert sse.status_code == 200
            assert shared.held_by("203.0.113.1") == 1 and shared.in_use == 2
        await until(lambda: shared.in_use == 1)
        engine.run_free()
    assert shared.refused == {"client": 0, "total": 1}
    other_door[1].release()
    assert shared.in_use == 0
