"""Nobody waits in vain and the lists never lie: why no worker is ready (to waiting callers,
/readyz and new requests), a client that leaves before its first byte, the voice list while no
worker is ready, and voices whose language cannot be spoken."""

from __future__ import annotations

import asyncio
import functools
import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from litestar.types import Message

from harness import engines
from speechd.api.app import create_app
from speechd.casts import schema, worker_health
from speechd.config import Settings
from speechd.durable import AppendRecord, Store
from speechd.engine import EngineConfig
from speechd.errors import ModelUnavailable
from speechd.worker import Parts, Supervisor, WorkerConfig, run_worker
from speechd.worker._process import EXIT_MODEL_UNAVAILABLE, EXIT_OK
from tests.api.test_errors import assert_error

JAPANESE = "Voices for Japanese need a G2P that is not installed here (pip install 'misaki[ja]')."
MODES = [
    pytest.param({}, id="audio"),
    pytest.param({"stream": False}, id="whole"),
    pytest.param({"stream_format": "sse"}, id="sse"),
]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def announce(
    store: Store,
    *,
    kind: str = "ready",
    worker: str = "w1",
    heartbeat_ms: int = 60_000,
    voices: tuple[str, ...] = engines.VOICES,
    **fields: Any,
) -> None:
    """Write a worker's notice by hand: a worker that says it is ready and then does nothing,
    or one that says what went wrong."""
    notice = schema.WorkerNotice(
        kind=kind,
        worker=worker,
        time_ms=now_ms(),
        voices=list(voices) if kind == "ready" else [],
        heartbeat_ms=heartbeat_ms,
        **fields,
    )
    await store.append(schema.worker_stream(worker), [AppendRecord(schema.encode(notice))])


@asynccontextmanager
async def served(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The app on this event loop (AsyncTestClient runs it on another, blocking this one while
    a request runs), so a test can write to the store while a caller waits."""
    app = create_app(settings)
    async with app.lifespan():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            yield client


async def wait_for_job(store: Store, count: int = 1) -> None:
    """Until `count` jobs are in line (the caller is then waiting on its cast)."""
    deadline = time.monotonic() + 30
    while await store.check_tail(schema.JOBS) < count:
        assert time.monotonic() < deadline, "the cast was never submitted"
        await asyncio.sleep(0.02)


# -- why no worker is ready ----------------------------------------------------------------


def no_model(config: object) -> object:
    raise ModelUnavailable("no weights in /nowhere; set --model-dir")


def worker_config(store_dir: Path) -> WorkerConfig:
    return WorkerConfig(store=str(store_dir), engine=EngineConfig(), worker_id="w1")


async def test_a_model_that_cannot_load_is_a_503_with_the_reason_everywhere(
    settings: Settings, store_dir: Path, store: Store
) -> None:
    parts = Parts(load_engine=no_model, chunk_policy=engines.FakeChunkPolicy)
    code = await asyncio.to_thread(run_worker, worker_config(store_dir), parts=parts)
    assert code == EXIT_MODEL_UNAVAILABLE
    reason = "The model is unavailable: no weights in /nowhere; set --model-dir."
    async with AsyncTestClient(create_app(settings)) as client:
        for response in (
            await client.get("/readyz"),
            await client.post("/v1/audio/speech", json={"input": "Hello."}),
            await client.post("/v1/casts", json={"input": "Hello."}),
        ):
            error = assert_error(response, 503, type="server_error", code="model_unavailable")
            assert error["message"] == reason
    assert await store.list(schema.CAST_PREFIX) == []


@pytest.mark.parametrize("mode", MODES)
async def test_a_waiting_caller_hears_when_the_model_will_not_load(
    settings: Settings, store: Store, mode: dict[str, Any]
) -> None:
    await announce(store)  # ready, then it dies: the next life fails to load the model
    async with served(settings) as client:
        waiting = asyncio.create_task(
            client.post("/v1/audio/speech", json={"input": "Hello there.", **mode})
        )
        await wait_for_job(store)
        await announce(store, kind="unavailable", error="CUDA out of memory.")
        response = await asyncio.wait_for(waiting, 30)
    error = assert_error(response, 503, type="server_error", code="model_unavailable")
    assert error["message"] == "The model is unavailable: CUDA out of memory."


async def test_a_waiting_caller_gives_up_once_no_worker_was_ready_for_the_grace(
    settings: Settings, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("speechd.service._casts.UNREADY_GRACE_S", 0.5)
    await announce(store, heartbeat_ms=300)  # then it goes silent
    async with served(settings) as client:
        response = await asyncio.wait_for(
            client.post("/v1/audio/speech", json={"input": "Hello there."}), 30
        )
        readyz = await client.get("/readyz")
    error = assert_error(response, 503, type="server_error", code="no_worker_ready")
    assert "the last one went silent" in error["message"]
    assert "Gave up after" in error["message"]
    error = assert_error(readyz, 503, type="server_error", code="no_worker_ready")
    assert "the last one went silent" in error["message"]


async def test_loading_is_said_and_a_retry_after_a_failure_names_the_failure(
    settings: Settings, store: Store
) -> None:
    async with AsyncTestClient(create_app(settings)) as client:
        await announce(store, kind="loading")
        readyz = await client.get("/readyz")
        error = assert_error(readyz, 503, type="server_error", code="no_worker_ready")
        assert error["message"] == "No worker is ready yet: the model is loading."
        await asyncio.sleep(0.3)  # the answer is cached a quarter of a second
        await announce(store, kind="loading", error="Cannot load Kokoro-82M from '/m': bad zip")
        readyz = await client.get("/readyz")
        error = assert_error(readyz, 503, type="server_error", code="model_unavailable")
        assert error["message"] == (
            "The model is unavailable: Cannot load Kokoro-82M from '/m': bad zip "
            "(a worker is trying again)."
        )


def load_unless(config: EngineConfig, *, broken: str) -> object:
    """The engine double, or ModelUnavailable once the file `broken` exists (module-level, so
    a spawned worker process can unpickle it)."""
    if Path(broken).exists():
        raise ModelUnavailable("the weights went missing")
    return engines.load_engine(config)


@pytest.mark.slow
async def test_a_caller_waiting_through_a_crash_hears_that_the_model_will_not_load(
    settings: Settings, store_dir: Path, store: Store, tmp_path: Path
) -> None:
    broken = tmp_path / "broken"
    parts = Parts(
        load_engine=functools.partial(load_unless, broken=str(broken)),
        chunk_policy=engines.FakeChunkPolicy,
        encoders=engines.FakeEncoder,
    )
    config = WorkerConfig(store=str(store_dir), engine=EngineConfig(), heartbeat_s=0.2)
    supervisor = Supervisor(config, parts=parts, backoff_s=0.1)
    supervisor.start()
    try:
        deadline = time.monotonic() + 60
        while not (await worker_health(store, now_ms=now_ms())).ready:
            assert time.monotonic() < deadline, "the worker never got ready"
            await asyncio.sleep(0.05)
        broken.touch()  # from its next start on, the model cannot be loaded
        async with served(settings) as client:
            # Its second chunk kills the worker; the supervisor restarts it, and it fails.
            text = "this text will CRASH the worker"
            response = await asyncio.wait_for(
                client.post("/v1/audio/speech", json={"input": text, "stream": False}), 60
            )
    finally:
        supervisor.stop()
    error = assert_error(response, 503, type="server_error", code="model_unavailable")
    assert error["message"] == "The model is unavailable: the weights went missing."
    assert supervisor.exit_codes[0] == -9  # the crash; then failed loads (exit code 3)
    assert set(supervisor.exit_codes[1:]) <= {EXIT_MODEL_UNAVAILABLE}


# -- a client that leaves before its first byte ----------------------------------------------


async def call(app: Litestar, body: dict[str, Any], gone: asyncio.Event) -> list[Message]:
    """One POST /v1/audio/speech straight through the ASGI app; the client disconnects when
    `gone` is set. Returns what the app sent."""
    payload = json.dumps(body).encode()
    pending: list[Message] = [{"type": "http.request", "body": payload, "more_body": False}]
    sent: list[Message] = []

    async def receive() -> Message:
        if pending:
            return pending.pop()
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/audio/speech",
        "raw_path": b"/v1/audio/speech",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"testserver"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
        "state": {},
    }
    await app(scope, receive, send)  # type: ignore[arg-type]
    return sent


@pytest.mark.parametrize("mode", MODES)
async def test_a_disconnect_before_the_first_byte_frees_the_request(
    settings: Settings, store: Store, mode: dict[str, Any]
) -> None:
    await announce(store)  # ready, but it makes nothing: the caller would wait for ever
    app = create_app(settings)
    async with app.lifespan():
        gone = asyncio.Event()
        request = asyncio.create_task(call(app, {"input": "Nobody will hear this.", **mode}, gone))
        await wait_for_job(store)
        await asyncio.sleep(0.2)  # it is waiting on the first audio now
        assert not request.done()
        gone.set()
        sent = await asyncio.wait_for(request, 10)
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 499
    # Its cast stays in line for anyone else who asks.
    (info,) = await store.list(schema.CAST_PREFIX)
    assert info.next_seq == 1


# -- voices -------------------------------------------------------------------------------


def fixed_languages(voices: object) -> dict[str, str]:
    return {"j": JAPANESE}


@contextmanager
def worker_thread(store_dir: Path) -> Iterator[Callable[[], list[int]]]:
    """A worker process body (`run_worker`) on a thread, with the voices of the engine double
    and Japanese ones it cannot speak; stopped when the block ends."""
    stop = threading.Event()
    codes: list[int] = []
    parts = Parts(
        load_engine=engines.load_engine,
        chunk_policy=engines.FakeChunkPolicy,
        encoders=engines.FakeEncoder,
        languages=fixed_languages,
    )
    thread = threading.Thread(
        target=lambda: codes.append(run_worker(worker_config(store_dir), stop=stop, parts=parts))
    )
    thread.start()
    try:
        yield lambda: codes
    finally:
        stop.set()
        thread.join(30)


async def test_the_voice_list_answers_from_the_last_known_set_while_no_worker_is_ready(
    settings: Settings, store_dir: Path
) -> None:
    async with AsyncTestClient(create_app(settings)) as client:
        # No worker ever: a 503 that says so (the model list needs no worker).
        voices = await client.get("/v1/audio/voices")
        error = assert_error(voices, 503, type="server_error", code="no_worker_ready")
        assert "none has started" in error["message"]
        assert (await client.get("/v1/audio/models")).status_code == 200
        with worker_thread(store_dir) as codes:
            deadline = time.monotonic() + 30
            while (await client.get("/readyz")).status_code != 200:
                assert time.monotonic() < deadline and not codes(), "the worker never got ready"
                await asyncio.sleep(0.05)
            live = (await client.get("/v1/audio/voices")).json()
        assert codes() == [EXIT_OK]
        deadline = time.monotonic() + 10  # past the cached answer (a second)
        while (await client.get("/readyz")).status_code != 503:
            assert time.monotonic() < deadline, "still ready after the worker stopped"
            await asyncio.sleep(0.1)
        kept = await client.get("/v1/audio/voices")
        models = await client.get("/v1/audio/models")
    assert kept.status_code == 200 and kept.json() == live
    assert {"id": "af_heart", "name": "Heart (American English, female)"} in live["voices"]
    assert [v["id"] for v in live["voices"]] == sorted(engines.VOICES)
    assert models.status_code == 200 and {"id": "tts-1"} in models.json()["models"]


async def test_a_voice_whose_language_cannot_be_spoken_is_refused_and_not_listed(
    settings: Settings, store: Store
) -> None:
    await announce(store, voices=("af_heart", "jf_alpha"), unspeakable={"j": JAPANESE})
    async with AsyncTestClient(create_app(settings)) as client:
        voices = (await client.get("/v1/audio/voices")).json()["voices"]
        assert [v["id"] for v in voices] == ["af_heart"]
        for path in ("/v1/audio/speech", "/v1/casts"):
            response = await client.post(path, json={"input": "Konnichiwa.", "voice": "jf_alpha"})
            error = assert_error(response, 400, param="voice", code="voice_unavailable")
            assert error["message"] == JAPANESE
        assert await store.list(schema.CAST_PREFIX) == []
        # A blend is spoken in its first voice's language: English G2P, a Japanese timbre.
        response = await client.post(
            "/v1/casts", json={"input": "Hello.", "voice": "af_heart(2)+jf_alpha(1)"}
        )
        assert response.status_code == 201, response.text
