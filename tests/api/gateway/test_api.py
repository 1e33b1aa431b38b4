"""The cast API: submitting (`POST /v1/casts`, through the shared CastService) and reading a
cast's status while the real worker makes it."""

from __future__ import annotations

import json

import httpx
import pytest

from speechd.casts import CastState
from speechd.config import Settings
from speechd.durable import Store
from speechd.limits import MAX_CAST_BODY_BYTES, MAX_CAST_CHARS
from speechd.worker import Worker
from tests.api.gateway._support import LiveServer, StepEngine, serve, status_when, submit

TEXT = "The quick brown fox.\nThen it naps in the sun for an hour, and dreams of the lazy dog."


async def test_submit_returns_at_once_with_a_link(
    engine: StepEngine, server: LiveServer, http: httpx.AsyncClient
) -> None:
    engine.hold()  # no audio yet: the answer does not wait for any
    response = await http.post("/v1/casts", json={"input": TEXT, "voice": "am_adam"})
    assert response.status_code == 201
    body = response.json()
    assert set(body) == {"id", "url", "status"}
    assert body["status"] == "queued"
    cast_id = body["id"]
    assert body["url"] == f"{server.url}/c/{cast_id}"
    # The same headers as /v1/audio/speech: any client can turn the answer into a link.
    assert response.headers["x-cast-id"] == cast_id
    assert response.headers["x-cast-url"] == body["url"]
    assert f"</v1/casts/{cast_id}/audio>" in response.headers["link"]


async def test_identical_requests_share_one_cast_with_speech(http: httpx.AsyncClient) -> None:
    first = await http.post("/v1/casts", json={"input": TEXT, "voice": "am_adam"})
    again = await http.post("/v1/casts", json={"input": f"{TEXT}\n", "voice": "am_adam"})
    other = await http.post("/v1/casts", json={"input": TEXT, "voice": "af_heart"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert other.json()["id"] != first.json()["id"]
    # /v1/audio/speech submits through the same service: the same request is the same cast.
    speech = await http.post(
        "/v1/audio/speech",
        json={"input": TEXT, "voice": "am_adam", "model": "tts-1", "response_format": "mp3"},
    )
    assert speech.status_code == 200
    assert speech.headers["x-cast-id"] == first.json()["id"]
    metrics = (await http.get("/metrics")).text
    assert 'speechd_casts_submitted_total{outcome="created"} 2.0' in metrics
    assert 'speechd_casts_submitted_total{outcome="existing"} 2.0' in metrics


async def test_status_shows_public_facts_and_a_derived_title(
    engine: StepEngine, http: httpx.AsyncClient
) -> None:
    engine.hold()
    cast_id = await submit(http, TEXT, speed=1.25)
    view = (await http.get(f"/v1/casts/{cast_id}")).json()
    assert view["status"] in ("queued", "generating")  # the worker may have started it
    assert view["title"] == "The quick brown fox."  # the first line
    assert view["voice"] == "af_heart"
    assert view["speed"] == 1.25
    assert view["format"] == "mp3"
    assert view["model"] == "kokoro"
    assert view["created"] > 1_700_000_000
    assert view["progress"]["chunks_done"] == 0
    assert view["progress"]["audio_seconds"] == 0.0
    assert "naps in the sun" not in (await http.get(f"/v1/casts/{cast_id}")).text


async def test_an_explicit_title_wins(http: httpx.AsyncClient) -> None:
    cast_id = await submit(http, TEXT, title="  Fox  ")
    assert (await http.get(f"/v1/casts/{cast_id}")).json()["title"] == "Fox"


async def test_status_follows_the_worker(
    store: Store, engine: StepEngine, http: httpx.AsyncClient
) -> None:
    text = "One two. Three four five six. Seven eight nine ten eleven twelve thirteen fourteen."
    durations = engine.durations(text)
    assert len(durations) == 3
    engine.hold()
    cast_id = await submit(http, text, response_format="wav")
    await status_when(store, cast_id, lambda s: s.state == CastState.GENERATING)
    engine.allow(2)
    await status_when(store, cast_id, lambda s: s.chunks_done == 2)
    view = (await http.get(f"/v1/casts/{cast_id}")).json()
    assert view["status"] == "generating"
    assert view["attempt"] == 1
    progress = view["progress"]
    assert (progress["chunks_done"], progress["chunks_planned"]) == (2, 3)
    assert progress["audio_seconds"] == pytest.approx(sum(durations[:2]), abs=0.002)
    assert progress["lead_seconds"] <= progress["audio_seconds"]
    engine.allow(1)
    await status_when(store, cast_id, lambda s: s.state == CastState.DONE)
    view = (await http.get(f"/v1/casts/{cast_id}")).json()
    assert view["status"] == "done"
    assert view["progress"]["chunks_done"] == 3
    assert view["progress"]["audio_seconds"] == pytest.approx(sum(durations), abs=0.003)


async def test_status_of_a_failed_cast(store: Store, http: httpx.AsyncClient) -> None:
    cast_id = await submit(http, "A fine start. Then a POISON chunk that never renders.")
    await status_when(store, cast_id, lambda s: s.state == CastState.FAILED)
    view = (await http.get(f"/v1/casts/{cast_id}")).json()
    assert view["status"] == "failed"
    assert "this chunk is poisoned" in view["error"]


async def test_input_up_to_200000_characters(engine: StepEngine, http: httpx.AsyncClient) -> None:
    engine.hold()  # plan it, but never render 4000 s of audio here
    text = ("word " * 40_000)[:MAX_CAST_CHARS]
    assert (await http.post("/v1/casts", json={"input": text})).status_code == 201
    too_long = await http.post("/v1/casts", json={"input": text + "x"})
    assert too_long.status_code == 400
    error = too_long.json()["error"]
    assert (error["param"], error["type"]) == ("input", "invalid_request_error")
    assert "200000 characters" in error["message"]


async def test_the_cast_route_has_its_own_body_limit(
    engine: StepEngine, http: httpx.AsyncClient
) -> None:
    engine.hold()
    # 200,000 characters, half of them emoji that json.dumps sends as escaped surrogate
    # pairs: 1.3 MB, over the app's 1 MiB limit for other routes, a cast this route takes.
    body = json.dumps({"input": "\U0001f600 " * (MAX_CAST_CHARS // 2)})
    assert len(body) > Settings(data_dir="unused").max_body_bytes
    headers = {"content-type": "application/json"}
    assert (await http.post("/v1/casts", content=body, headers=headers)).status_code == 201
    speech = await http.post("/v1/audio/speech", content=body, headers=headers)
    assert speech.status_code == 413
    huge = json.dumps({"input": "x", "title": "y" * MAX_CAST_BODY_BYTES})
    too_large = await http.post("/v1/casts", content=huge, headers=headers)
    assert too_large.status_code == 413
    assert too_large.json()["error"]["code"] == "payload_too_large"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": ""}, "input"),
        ({"input": "   \n"}, "input"),
        ({"input": "bell \x07 here"}, "input"),
        ({"input": TEXT, "speed": 5}, "speed"),
        ({"input": TEXT, "speed": 0}, "speed"),
        ({"input": TEXT, "response_format": "ogg"}, "response_format"),
        ({"input": TEXT, "voice": "nobody"}, "voice"),
        ({"input": TEXT, "title": "t" * 201}, "title"),
        ({"input": 42}, "input"),
        ({"voice": "af_heart"}, "input"),
    ],
)
async def test_bad_requests_are_rejected(
    http: httpx.AsyncClient, body: dict[str, object], param: str
) -> None:
    response = await http.post("/v1/casts", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param


async def test_an_unknown_model_is_not_found(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/casts", json={"input": TEXT, "model": "tts-9"})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"
    ok = await http.post("/v1/casts", json={"input": TEXT, "model": "tts-1"})
    assert ok.status_code == 201


async def test_writes_need_a_key_when_keys_are_configured(store: Store, worker: Worker) -> None:
    settings = Settings(data_dir="unused", api_keys=("sk-test",))
    async with serve(store, settings) as live, httpx.AsyncClient(base_url=live.url) as http:
        anonymous = await http.post("/v1/casts", json={"input": TEXT})
        assert anonymous.status_code == 401
        assert anonymous.json()["error"]["code"] == "invalid_api_key"
        assert anonymous.headers["www-authenticate"] == "Bearer"
        wrong = await http.post(
            "/v1/casts", json={"input": TEXT}, headers={"authorization": "Bearer nope"}
        )
        assert wrong.status_code == 401
        ok = await http.post(
            "/v1/casts", json={"input": TEXT}, headers={"authorization": "Bearer sk-test"}
        )
        assert ok.status_code == 201
        # Reads stay public: the link is the capability.
        cast_id = ok.json()["id"]
        assert (await http.get(f"/v1/casts/{cast_id}")).status_code == 200
        assert (await http.get(f"/c/{cast_id}")).status_code == 200


async def test_links_use_the_public_url_when_set(store: Store, worker: Worker) -> None:
    settings = Settings(data_dir="unused", public_url="https://speech.example.org/")
    async with serve(store, settings) as live, httpx.AsyncClient(base_url=live.url) as http:
        response = await http.post("/v1/casts", json={"input": TEXT})
        body = response.json()
        assert body["url"] == f"https://speech.example.org/c/{body['id']}"
        assert response.headers["x-cast-url"] == body["url"]
        view = (await http.get(f"/v1/casts/{body['id']}")).json()
        assert view["url"] == body["url"]
        assert view["audio_url"] == f"https://speech.example.org/v1/casts/{body['id']}/audio"


async def test_no_cast_without_a_ready_worker(store: Store) -> None:
    async with serve(store) as live, httpx.AsyncClient(base_url=live.url) as http:
        response = await http.post("/v1/casts", json={"input": TEXT})
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "no_worker_ready"


async def test_the_queue_limit_is_the_speech_routes(
    store: Store, engine: StepEngine, worker: Worker
) -> None:
    engine.hold()
    settings = Settings(data_dir="unused", max_queue=1)
    async with serve(store, settings) as live, httpx.AsyncClient(base_url=live.url) as http:
        await submit(http, "The first cast takes the only place.")
        full = await http.post("/v1/casts", json={"input": "A second one waits its turn."})
        assert full.status_code == 429
        assert full.json()["error"]["code"] == "queue_full"
        assert int(full.headers["retry-after"]) >= 1
        speech = await http.post("/v1/audio/speech", json={"input": "Nor does this one."})
        assert speech.status_code == 429
        # The cast already made is no new work: asking for it again is fine.
        again = await http.post("/v1/casts", json={"input": "The first cast takes the only place."})
        assert again.status_code == 200
