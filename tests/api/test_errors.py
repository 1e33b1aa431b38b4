"""Every error in OpenAI's shape, with the fitting status and `param`; bad input never leaves a
half-made cast behind and the server keeps serving."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar.testing import AsyncTestClient

from speechd import casts
from speechd.api.app import create_app
from speechd.config import Settings
from speechd.durable import AppendRecord, Store
from speechd.engine import EngineConfig
from speechd.service import CastRequest, CastService
from speechd.worker import Worker


def assert_error(
    response: httpx.Response,
    status: int,
    *,
    type: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    assert "Traceback" not in error["message"]
    assert (error["type"], error["param"], error["code"]) == (type, param, code)
    return error


GOOD = {"model": "tts-1", "input": "Good input.", "voice": "alloy"}

BAD_INPUTS = [
    pytest.param({**GOOD, "input": ""}, 400, "input", None, id="empty"),
    pytest.param({**GOOD, "input": "   "}, 400, "input", None, id="blank"),
    pytest.param({**GOOD, "input": "x" * 4097}, 400, "input", None, id="4097-chars"),
    pytest.param({**GOOD, "voice": "zz_nobody"}, 400, "voice", "voice_not_found", id="voice"),
    pytest.param({**GOOD, "voice": {"id": "zz_nobody"}}, 400, "voice", "voice_not_found",
                 id="voice-object"),
    pytest.param({**GOOD, "voice": {"name": "x"}}, 400, "voice.id", None,
                 id="voice-object-shape"),
    pytest.param({**GOOD, "model": "tts-2"}, 404, "model", "model_not_found", id="unknown-model"),
    pytest.param({**GOOD, "response_format": "ogg"}, 400, "response_format", None, id="format"),
    pytest.param({**GOOD, "speed": 0}, 400, "speed", None, id="speed-0"),
    pytest.param({**GOOD, "speed": 5}, 400, "speed", None, id="speed-5"),
    pytest.param({**GOOD, "speed": "fast"}, 400, "speed", None, id="speed-type"),
    pytest.param({**GOOD, "input": 42}, 400, "input", None, id="input-type"),
    pytest.param({**GOOD, "stream_format": "mp3"}, 400, "stream_format", None,
                 id="stream-format"),
    pytest.param({"model": "tts-1", "voice": "alloy"}, 400, "input", None, id="no-input"),
    pytest.param({**GOOD, "input": "ring \x07 bell"}, 400, "input", None, id="control-char"),
    pytest.param({**GOOD, "input": "nul \x00 byte"}, 400, "input", None, id="nul"),
    pytest.param([GOOD], 400, None, None, id="array"),
]  # fmt: skip

BAD_BODIES = [
    pytest.param(b'{"input": "hi", "voice": ', id="malformed"),
    pytest.param(b"", id="empty-body"),
    pytest.param(b'{"input": "lone \\ud83d surrogate", "voice": "alloy"}', id="lone-surrogate"),
    pytest.param(b'{"input": "cesu \xed\xa0\xbd", "voice": "alloy"}', id="invalid-utf8"),
    pytest.param(b"input=hi&voice=alloy", id="form-encoded"),
]


async def assert_still_serving_and_no_cast(client: AsyncTestClient, store: Store) -> None:
    assert (await client.get("/healthz")).status_code == 200
    assert await store.list(casts.CAST_PREFIX) == []
    assert await store.list(casts.CATALOG_PREFIX) == []
    assert await store.check_tail(casts.JOBS) == 0


@pytest.mark.parametrize(("body", "status", "param", "code"), BAD_INPUTS)
async def test_bad_input(
    client: AsyncTestClient, store: Store, body: Any, status: int, param: str | None,
    code: str | None,
) -> None:  # fmt: skip
    response = await client.post("/v1/audio/speech", json=body)
    assert_error(response, status, param=param, code=code)
    await assert_still_serving_and_no_cast(client, store)


@pytest.mark.parametrize("raw", BAD_BODIES)
async def test_bad_body(client: AsyncTestClient, store: Store, raw: bytes) -> None:
    response = await client.post(
        "/v1/audio/speech", content=raw, headers={"Content-Type": "application/json"}
    )
    assert_error(response, 400)
    await assert_still_serving_and_no_cast(client, store)


async def test_ten_megabyte_body_is_413(client: AsyncTestClient, store: Store) -> None:
    body = json.dumps({**GOOD, "input": "x" * 10_000_000}).encode()
    response = await client.post(
        "/v1/audio/speech", content=body, headers={"Content-Type": "application/json"}
    )
    assert_error(response, 413, code="payload_too_large")
    await assert_still_serving_and_no_cast(client, store)


async def test_unknown_route_and_method(client: AsyncTestClient) -> None:
    assert_error(await client.get("/v1/nothing/here"), 404)
    response = await client.get("/v1/audio/speech")
    assert_error(response, 405)
    assert "POST" in response.headers["allow"]
    assert_error(await client.get("/v1/models/tts-2"), 404, param="model", code="model_not_found")


async def test_unexpected_failure_is_a_generic_500_and_the_trace_stays_in_the_log(
    settings: Settings, worker: Worker, caplog: pytest.LogCaptureFixture
) -> None:
    def broken_clock() -> float:
        raise RuntimeError("secret internals /etc/passwd")

    app = create_app(settings, clock=broken_clock)
    async with AsyncTestClient(app) as client:
        response = await client.post("/v1/audio/speech", json=GOOD)
        error = assert_error(response, 500, type="server_error")
        assert "secret" not in response.text and "RuntimeError" not in response.text
        assert error["message"] == "The server had an error while processing your request."
        assert (await client.get("/healthz")).status_code == 200
    assert any("secret internals" in str(r.exc_info) for r in caplog.records if r.exc_info)


async def test_no_ready_worker_is_503(settings: Settings, store: Store) -> None:
    async with AsyncTestClient(create_app(settings)) as client:
        assert_error(await client.get("/readyz"), 503, type="server_error", code="no_worker_ready")
        response = await client.post("/v1/audio/speech", json=GOOD)
        assert_error(response, 503, type="server_error", code="no_worker_ready")
        assert (await client.get("/healthz")).status_code == 200
    assert await store.list(casts.CAST_PREFIX) == []


@pytest.fixture
async def keyed_client(store_dir: Path, worker: Worker) -> AsyncIterator[AsyncTestClient]:
    settings = Settings(data_dir=str(store_dir), api_keys=("sk-one", "sk-two"))
    async with AsyncTestClient(create_app(settings)) as client:
        yield client


@pytest.mark.parametrize(
    "authorization", [None, "", "Bearer", "Bearer sk-three", "Basic sk-one", "sk-one"]
)
async def test_speech_needs_a_key_when_keys_are_set(
    keyed_client: AsyncTestClient, store: Store, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    response = await keyed_client.post("/v1/audio/speech", json=GOOD, headers=headers)
    assert_error(response, 401, type="authentication_error", code="invalid_api_key")
    assert response.headers["www-authenticate"] == "Bearer"
    await assert_still_serving_and_no_cast(keyed_client, store)


async def test_a_good_key_passes_and_the_lists_stay_open(keyed_client: AsyncTestClient) -> None:
    for key in ("sk-one", "sk-two"):
        response = await keyed_client.post(
            "/v1/audio/speech", json=GOOD, headers={"Authorization": f"Bearer {key}"}
        )
        assert response.status_code == 200, response.text
    for path in ("/v1/models", "/v1/models/tts-1", "/v1/audio/models", "/v1/audio/voices"):
        assert (await keyed_client.get(path)).status_code == 200, path
    assert (await keyed_client.get("/healthz")).status_code == 200


async def test_queue_full_is_429_with_retry_after(store_dir: Path, store: Store) -> None:
    # A worker that announced itself but works no jobs: the queue only grows.
    now_ms = int(time.time() * 1000)
    notice = casts.WorkerNotice(kind="ready", worker="idle", time_ms=now_ms, voices=["af_heart"])
    await store.append(casts.worker_stream("idle"), [AppendRecord(casts.encode(notice))])
    secret = await casts.deployment_secret(store)
    engine = EngineConfig()
    service = CastService(
        store, secret, max_queue=1, default_voice="af_heart", voice_map=engine.voice_map
    )
    await service.submit(CastRequest(text="first"), max_chars=4096)
    settings = Settings(data_dir=str(store_dir), max_queue=1)
    async with AsyncTestClient(create_app(settings)) as client:
        response = await client.post("/v1/audio/speech", json={**GOOD, "input": "second"})
        assert_error(response, 429, type="rate_limit_exceeded", code="queue_full")
        assert int(response.headers["retry-after"]) >= 1
    assert len(await store.list(casts.CAST_PREFIX)) == 1
