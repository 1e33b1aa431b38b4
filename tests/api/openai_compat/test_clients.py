"""A live `speechd api` on loopback, the real worker in its own process (on the engine test
double), and real clients: the `openai` package, Open WebUI's request sequence, raw HTTP for
SSE and broken streams."""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import httpx
import openai
import pytest

from harness.engines import chunked_text
from harness.servers import LiveServer, start_server, wait_until
from harness.workers import expected, worker_process
from speechd import casts
from speechd.casts import schema
from speechd.durable import EmbeddedStore, Store

pytestmark = pytest.mark.slow

T = TypeVar("T")
KEY = "sk-live-test"
# The engine computes for half as long as the audio lasts (a slow CPU), so a cast of LONG
# takes a few seconds: long enough to still be in the making after its first bytes.
SLOW = {"rtf": 0.5}
LONG = chunked_text(6)


def on_store(store_dir: Path, read: Callable[[Store], Awaitable[T]]) -> T:
    """Run `read` on a store of its own (the test itself is synchronous)."""

    async def body() -> T:
        store = await EmbeddedStore.open(store_dir)
        try:
            return await read(store)
        finally:
            await store.close()

    return asyncio.run(body())


def cast_state(store_dir: Path, cast_id: str) -> casts.CastState:
    async def read(store: Store) -> casts.CastState:
        status = await casts.cast_status(store, cast_id, now_ms=int(time.time() * 1000))
        return status.state

    return on_store(store_dir, read)


def is_mp3(data: bytes) -> bool:
    return len(data) > 4 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0


@pytest.fixture(scope="module")
def live_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("live") / "data"


@pytest.fixture(scope="module")
def live(live_dir: Path) -> Iterator[LiveServer]:
    with (
        worker_process(live_dir, **SLOW),
        start_server(["api", "--data-dir", str(live_dir)]) as server,
    ):
        yield server


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data = tmp_path_factory.mktemp("keyed") / "data"
    with (
        worker_process(data),
        start_server(["api", "--data-dir", str(data), "--api-key", KEY]) as server,
    ):
        yield server


def sdk(server: LiveServer, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.v1, api_key=key, max_retries=0, timeout=30)


# -- the openai package --------------------------------------------------------------------


def test_sdk_whole_body(live: LiveServer) -> None:
    with sdk(live) as client:
        response = client.audio.speech.create(model="tts-1", voice="alloy", input="Whole body.")
    cast_id = response.response.headers["x-cast-id"]
    assert casts.is_cast_id(cast_id)
    assert response.content == expected(cast_id, "Whole body.")
    assert is_mp3(response.content)


def test_sdk_streaming_bytes_arrive_before_the_cast_ends(live: LiveServer, live_dir: Path) -> None:
    with sdk(live) as client, client.audio.speech.with_streaming_response.create(
        model="gpt-4o-mini-tts", voice="af_bella", input=LONG, response_format="wav",
    ) as response:  # fmt: skip
        cast_id = response.headers["x-cast-id"]
        chunks = response.iter_bytes()
        first = next(chunks)
        assert cast_state(live_dir, cast_id) == casts.CastState.GENERATING
        body = first + b"".join(chunks)
    assert body == expected(cast_id, LONG, "wav")
    assert body.startswith(b"RIFF") and cast_state(live_dir, cast_id) == casts.CastState.DONE


def test_sse_parsed_by_hand(live: LiveServer) -> None:
    text = chunked_text(5)
    payload = {"model": "tts-1", "voice": "alloy", "input": text, "stream_format": "sse"}
    events = []
    with httpx.stream(
        "POST", live.v1 + "/audio/speech", json=payload,
        headers={"Accept": "application/octet-stream"}, timeout=30,
    ) as response:  # fmt: skip
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        cast_id = response.headers["x-cast-id"]
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line.removeprefix("data: ")))
            else:
                assert line == "", line
    assert [e["type"] for e in events] == ["speech.audio.delta"] * 5 + ["speech.audio.done"]
    audio = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    assert audio == expected(cast_id, text)
    assert set(events[-1]["usage"]) == {"input_tokens", "output_tokens", "total_tokens"}


@pytest.mark.parametrize(
    ("kwargs", "error", "status", "code", "param"),
    [
        ({"voice": "zz_nobody"}, openai.BadRequestError, 400, "voice_not_found", "voice"),
        ({"speed": 5.0}, openai.BadRequestError, 400, None, "speed"),
        ({"input": ""}, openai.BadRequestError, 400, None, "input"),
        ({"input": "x" * 4097}, openai.BadRequestError, 400, None, "input"),
        ({"model": "tts-9"}, openai.NotFoundError, 404, "model_not_found", "model"),
        ({"input": "POISON from the start"}, openai.InternalServerError, 500, "cast_failed", None),
    ],
)
def test_sdk_errors_carry_code_and_param(
    live: LiveServer, kwargs: dict[str, object], error: type[openai.APIStatusError],
    status: int, code: str | None, param: str | None,
) -> None:  # fmt: skip
    request = {"model": "tts-1", "voice": "alloy", "input": "Errors.", **kwargs}
    with sdk(live) as client, pytest.raises(error) as caught:
        client.audio.speech.create(**request)  # type: ignore[arg-type]
    assert caught.value.status_code == status
    assert (caught.value.code, caught.value.param) == (code, param)
    assert (httpx.get(live.url + "/healthz")).status_code == 200


def test_sdk_authentication(keyed: LiveServer) -> None:
    with sdk(keyed, key="sk-wrong") as client, pytest.raises(openai.AuthenticationError) as caught:
        client.audio.speech.create(model="tts-1", voice="alloy", input="No.")
    assert caught.value.code == "invalid_api_key"
    with sdk(keyed, key=KEY) as client:
        ok = client.audio.speech.create(model="tts-1", voice="alloy", input="Yes.")
    assert is_mp3(ok.content)


# -- Open WebUI ----------------------------------------------------------------------------


def test_open_webui_sequence(keyed: LiveServer) -> None:
    """What Open WebUI's audio router does with TTS engine "openai" and a custom base URL:
    it lists models and voices without a key, then posts only {input, voice, model} with the
    key and reads the body whole, saving it as .mp3."""
    base = keyed.v1
    models = httpx.get(f"{base}/audio/models").json()["models"]
    voices = {v["id"]: v["name"] for v in httpx.get(f"{base}/audio/voices").json()["voices"]}
    assert {"id": "tts-1"} in models and "af_heart" in voices
    response = httpx.post(
        f"{base}/audio/speech",
        json={"input": "Hello from Open WebUI.", "voice": "af_heart", "model": models[0]["id"]},
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"},
        timeout=30,
    )
    response.raise_for_status()
    cast_id = response.headers["x-cast-id"]
    assert is_mp3(response.content)
    assert response.content == expected(cast_id, "Hello from Open WebUI.")


# -- sharing, disconnects, failures, limits ------------------------------------------------


def test_32_identical_concurrent_requests_make_one_cast_and_one_job(
    live: LiveServer, live_dir: Path
) -> None:
    payload = {"model": "tts-1", "voice": "bf_emma", "input": chunked_text(4)}
    barrier = threading.Barrier(32)
    results: list[httpx.Response] = []

    def post() -> None:
        with httpx.Client(timeout=60) as client:
            barrier.wait()
            results.append(client.post(live.v1 + "/audio/speech", json=payload))

    async def jobs_tail(store: Store) -> int:
        return await store.check_tail(schema.JOBS)

    # Jobs the workers are done with are trimmed, so count what these requests appended.
    before = on_store(live_dir, jobs_tail)
    threads = [threading.Thread(target=post) for _ in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [r.status_code for r in results] == [200] * 32
    (cast_id,) = {r.headers["x-cast-id"] for r in results}
    assert {r.content for r in results} == {expected(cast_id, payload["input"])}

    async def count(store: Store) -> tuple[int, int]:
        stream = (await store.read(schema.cast_stream(cast_id), 0)).records
        metas = [r for r in stream if schema.event_of(r) == schema.Event.META]
        return await store.check_tail(schema.JOBS) - before, len(metas)

    assert on_store(live_dir, count) == (1, 1)


def test_client_disconnect_mid_stream_does_not_cancel_the_cast(
    live: LiveServer, live_dir: Path
) -> None:
    payload = {"voice": "am_adam", "input": LONG}
    with httpx.stream("POST", live.v1 + "/audio/speech", json=payload, timeout=30) as response:
        cast_id = response.headers["x-cast-id"]
        next(response.iter_raw())
    # The client is gone after one chunk; the cast goes on and becomes replayable.
    assert cast_state(live_dir, cast_id) == casts.CastState.GENERATING
    wait_until(lambda: cast_state(live_dir, cast_id) == casts.CastState.DONE, 20, "the cast")
    again = httpx.post(live.v1 + "/audio/speech", json=payload, timeout=30)
    assert again.headers["x-cast-id"] == cast_id and again.content == expected(cast_id, LONG)


def test_failure_mid_audio_stream_aborts_the_transfer(live: LiveServer) -> None:
    payload = {"voice": "alloy", "input": "Break here, POISON now"}  # fails at the second chunk
    with (
        pytest.raises(httpx.RemoteProtocolError),
        httpx.stream("POST", live.v1 + "/audio/speech", json=payload, timeout=30) as response,
    ):
        assert response.status_code == 200
        response.read()
    assert httpx.get(live.url + "/healthz").status_code == 200


def test_ten_megabyte_body_is_413_and_the_server_keeps_serving(live: LiveServer) -> None:
    body = json.dumps({"voice": "alloy", "input": "x" * 10_000_000}).encode()
    response = httpx.post(
        live.v1 + "/audio/speech", content=body,
        headers={"Content-Type": "application/json"}, timeout=30,
    )  # fmt: skip
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    assert httpx.get(live.url + "/healthz").status_code == 200


# -- process lifecycle ---------------------------------------------------------------------


def test_health_answers_before_any_worker_is_ready(tmp_path: Path) -> None:
    with start_server(["api", "--data-dir", str(tmp_path / "data")], ready=False) as server:
        assert httpx.get(server.url + "/healthz").json() == {"status": "ok"}
        response = httpx.get(server.url + "/readyz")
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "no_worker_ready"
        with worker_process(tmp_path / "data"):
            wait_until(lambda: httpx.get(server.url + "/readyz").status_code == 200, 10, "ready")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_graceful_shutdown_finishes_in_flight_responses_and_exits_0(
    tmp_path: Path, sig: signal.Signals
) -> None:
    data = tmp_path / "data"
    with (
        worker_process(data, **SLOW),
        start_server(["api", "--data-dir", str(data)]) as server,
    ):
        payload = {"voice": "alloy", "input": LONG}
        with httpx.stream("POST", server.v1 + "/audio/speech", json=payload, timeout=30) as r:
            chunks = r.iter_raw()
            body = next(chunks)
            server.process.send_signal(sig)
            body += b"".join(chunks)
            cast_id = r.headers["x-cast-id"]
        assert body == expected(cast_id, LONG)
        assert server.process.wait(30) == 0
        with pytest.raises(httpx.ConnectError):
            httpx.get(server.url + "/healthz")
        assert "Traceback" not in server.log()
