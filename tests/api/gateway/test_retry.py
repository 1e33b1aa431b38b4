"""A cast that ended in `error` is made again by the same request, keeping the chunks it had:
`GET /v1/casts/{id}` says why it failed and that it can be retried; `eos` stays final."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from harness.engines import FakeChunk, FakeSynthesis, expected_audio
from speechd.audio import new_encoder
from speechd.casts._records import Retry, audio_chunk
from speechd.casts.schema import Event, Start, decode, event_of
from speechd.durable import Store
from tests.api.gateway._support import StepEngine, read_all, status_when, submit

# Three chunks in the worker's plan: 2, 4 and 8 words; the third is poisoned while broken.
TEXT = "One two. Three four five six. Seven POISON nine ten eleven twelve thirteen fourteen."


class Broken(StepEngine):
    """Fails every chunk holding POISON until `fixed` (a missing language pack, say)."""

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self.fixed = False

    def synthesize(
        self, chunk: FakeChunk, voice: str, speed: float, *, seed: int | None = None
    ) -> FakeSynthesis:
        if self.fixed and "POISON" in chunk.text:
            chunk = FakeChunk(chunk.index, chunk.text.replace("POISON", "poison"), chunk.phonemes)
            return StepEngine.synthesize(self, chunk, voice, speed, seed=seed)
        return super().synthesize(chunk, voice, speed, seed=seed)


@pytest.fixture
def engine() -> StepEngine:
    return Broken()


async def _failed(store: Store, http: httpx.AsyncClient) -> str:
    cast_id = await submit(http, TEXT, response_format="wav")
    await status_when(store, cast_id, lambda s: s.state == "failed")
    return cast_id


async def test_a_failed_cast_says_why_and_that_it_can_be_retried(
    store: Store, http: httpx.AsyncClient
) -> None:
    cast_id = await _failed(store, http)
    view = (await http.get(f"/v1/casts/{cast_id}")).json()
    assert view["status"] == "failed" and view["retryable"] is True
    assert "chunk 2 failed 3 times" in view["error"]
    assert view["progress"]["chunks_done"] == 2  # the two chunks before it are kept


async def test_the_same_request_makes_it_again_keeping_its_chunks(
    store: Store, engine: Broken, http: httpx.AsyncClient
) -> None:
    cast_id = await _failed(store, http)
    made = len(engine.calls)
    engine.fixed = True
    response = await http.post(
        "/v1/audio/speech", json={"input": TEXT, "response_format": "wav", "voice": "af_heart"}
    )
    assert response.status_code == 200, response.text
    assert response.headers["x-cast-id"] == cast_id
    # One valid file, the same bytes an uninterrupted cast makes (wav continues exactly).
    assert response.content == expected_audio(cast_id, TEXT, fmt="wav", encoders=new_encoder)
    assert len(engine.calls) == made + 1  # only the chunk that had failed
    stream = await read_all(store, cast_id)
    events = [event_of(r) for r in stream]
    assert events.count(Event.ERROR) == 1 and events.count(Event.RETRY) == 1
    retry_at = events.index(Event.RETRY)
    assert events[retry_at - 1] == Event.ERROR and events[retry_at + 1] == Event.START
    assert decode(stream[retry_at].body, Retry).attempt == 3
    start = decode(stream[retry_at + 1].body, Start)
    assert (start.attempt, start.keep) == (4, 2)
    assert [event_of(r) for r in stream[retry_at + 2 :]] == [Event.AUDIO, Event.EOS]
    assert audio_chunk(stream[retry_at + 2]).index == 2
    view = (await http.get(f"/v1/casts/{cast_id}")).json()
    assert (view["status"], view["retryable"], view["attempt"]) == ("done", False, 4)


async def test_concurrent_retries_remake_it_once_and_eos_stays_final(
    store: Store, engine: Broken, http: httpx.AsyncClient
) -> None:
    cast_id = await _failed(store, http)
    engine.fixed = True
    body = {"input": TEXT, "response_format": "wav"}
    answers = await asyncio.gather(*(http.post("/v1/casts", json=body) for _ in range(4)))
    assert {a.json()["id"] for a in answers} == {cast_id}
    await status_when(store, cast_id, lambda s: s.state == "done")
    stream = await read_all(store, cast_id)
    assert [event_of(r) for r in stream].count(Event.RETRY) == 1
    calls = len(engine.calls)
    again = await http.post("/v1/casts", json=body)  # a done cast is done for good
    assert again.json()["status"] == "done"
    await asyncio.sleep(0.3)
    assert len(await read_all(store, cast_id)) == len(stream) and len(engine.calls) == calls
