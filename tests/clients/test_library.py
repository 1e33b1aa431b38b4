"""`Client` and `AsyncClient` against a live server with a real worker (see conftest)."""

from __future__ import annotations

import contextlib
import http.server
import itertools
import json
import threading
from collections.abc import Iterator
from typing import NamedTuple
from urllib.parse import urlsplit

import pytest

from harness.servers import LiveServer, free_port
from speechd_client import (
    AsyncClient,
    AuthenticationError,
    CastFailed,
    CastNotFound,
    Client,
    RateLimited,
    ServerError,
    ServerUnreachable,
    StreamInterrupted,
    Unavailable,
    UnexpectedResponse,
    UnknownVoice,
)

from ._support import audio_of
from .conftest import AUDIO_PER_CHAR, KEY, VOICES

_texts = itertools.count()


def text(words: int = 12) -> str:
    """A text no other test speaks (identical requests share one cast)."""
    n = next(_texts)
    return " ".join(f"library{n} word{i}." for i in range(words))


@pytest.fixture
def client(server: LiveServer) -> Client:
    with Client(server.url, api_key=KEY) as client:
        yield client  # type: ignore[misc]


def test_voices_are_the_workers(client: Client) -> None:
    names = {v.id: v.name for v in client.voices()}
    assert set(VOICES) <= set(names) and names["af_heart"] == "Heart (American English, female)"


def test_speech_streams_one_whole_file_and_names_its_cast(client: Client) -> None:
    said = text()
    with client.speech(said, voice="am_adam", response_format="wav") as audio:
        pieces = list(audio)
    assert len(pieces) > 1  # it streamed
    rate, seconds = audio_of(b"".join(pieces))
    # Every word spoken (the engine double's chunks lose only the spaces between them).
    assert rate == 24000 and seconds == pytest.approx(len(said) * AUDIO_PER_CHAR, abs=0.02)
    assert audio.content_type.startswith("audio/")
    assert audio.cast_id and audio.cast_url and audio.cast_url.endswith(f"/c/{audio.cast_id}")


def test_a_trailing_v1_in_the_url_is_fine(server: LiveServer) -> None:
    with Client(server.url + "/v1/", api_key=KEY) as client:
        assert client.base_url == server.url
        assert client.voices()


async def test_the_async_client_gets_the_same_cast(client: Client, server: LiveServer) -> None:
    said = text()
    with client.speech(said) as audio:
        first = b"".join(audio)
    async with AsyncClient(server.url, api_key=KEY) as async_client:
        async with async_client.speech(said) as again:
            second = b"".join([data async for data in again])
        assert [v.id for v in await async_client.voices()] == [v.id for v in client.voices()]
    assert again.cast_id == audio.cast_id
    assert second == first


def test_a_cast_submitted_then_followed_and_read_as_records(client: Client) -> None:
    said = text(40)
    created = client.submit_cast(said, response_format="mp3", title="A test cast")
    assert created.url.endswith(f"/c/{created.id}") and created.status == "queued"
    with client.follow(created.id) as audio:
        followed = b"".join(audio)
    view = client.cast_status(created.id)
    assert view.status == "done" and view.title == "A test cast" and view.format == "mp3"
    assert view.progress.chunks_done == view.progress.chunks_planned > 1
    records = list(client.follow_records(created.id))
    assert [r.event for r in records][:2] == ["meta", "start"] and records[-1].event == "eos"
    chunks = [r for r in records if r.event == "audio"]
    assert [r.index for r in chunks] == list(range(len(chunks)))
    assert b"".join(r.body for r in chunks) == followed
    assert records[-1].json()["chunks"] == len(chunks)
    _, seconds = audio_of(followed)
    assert seconds == pytest.approx(view.progress.audio_seconds, abs=0.1)
    # The same request is the same cast: its audio, whole.
    assert client.submit_cast(said, response_format="mp3", title="A test cast").id == created.id


async def test_records_long_poll_at_the_tail(client: Client, server: LiveServer) -> None:
    created = client.submit_cast(text())
    async with AsyncClient(server.url, api_key=KEY) as async_client:
        records = [r async for r in async_client.follow_records(created.id)]
        page = await async_client.records(created.id, seq_num=len(records), wait=0.2)
    assert records[-1].terminal and page.records == [] and page.tail == len(records)


def test_an_unknown_voice_names_the_voices(client: Client) -> None:
    with pytest.raises(UnknownVoice) as caught, client.speech(text(), voice="xx_nobody"):
        pass
    error = caught.value
    assert (error.status, error.code, error.param) == (400, "voice_not_found", "voice")
    assert "xx_nobody" in error.message and all(v in error.message for v in VOICES)


def test_a_missing_or_wrong_key_says_how_to_pass_one(server: LiveServer) -> None:
    for key, said in [("", "needs an API key"), ("sk-wrong", "Incorrect API key")]:
        with (
            Client(server.url, api_key=key) as client,
            pytest.raises(AuthenticationError) as caught,
            client.speech(text()),
        ):
            pass
        assert caught.value.status == 401
        assert said in caught.value.message
        assert "--api-key" in caught.value.message and "SPEECHD_API_KEY" in caught.value.message


def test_no_server_says_where_and_how_to_start_one() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with Client(url) as client, pytest.raises(ServerUnreachable) as caught:
        client.voices()
    message = caught.value.message
    assert url in message and "connection refused" in message and "speechd serve" in message


def test_a_cast_that_fails_before_any_audio(client: Client) -> None:
    with pytest.raises(CastFailed) as caught, client.speech(f"POISON {text(2)}"):
        pass
    assert caught.value.status == 500 and caught.value.code == "cast_failed"


def test_a_cast_that_fails_mid_stream_is_never_a_whole_file(client: Client) -> None:
    # The engine double makes the first chunk of two words, then fails on the second.
    received = []
    with (
        pytest.raises(StreamInterrupted),
        client.speech(f"{text(2)} one two POISON three", response_format="wav") as audio,
    ):
        received.extend(audio)
    assert received  # the first chunk came


def test_an_unknown_cast(client: Client) -> None:
    with pytest.raises(CastNotFound) as caught:
        client.cast_status("AAAAAAAAAAAAAAAAAAAAAA")
    assert caught.value.status == 404


class Answer(NamedTuple):
    status: int
    body: bytes
    headers: dict[str, str]


@contextlib.contextmanager
def answering(answers: dict[str, Answer]) -> Iterator[str]:
    """A plain web server (not speechd) giving each request path its canned answer."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            answer = answers[urlsplit(self.path).path]
            self.send_response(answer.status)
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            self._answer()

        do_GET = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


HTML = {"content-type": "text/html"}
PAGE = b"<html><body>Bad gateway, or a blog.</body></html>"


def test_a_server_that_is_not_speechd() -> None:
    answers = {
        "/v1/audio/voices": Answer(200, PAGE, HTML),
        "/v1/audio/speech": Answer(502, PAGE, HTML),
    }
    with answering(answers) as url, Client(url) as client:
        with pytest.raises(UnexpectedResponse) as caught:
            client.voices()
        assert "not speechd's API" in caught.value.message
        with pytest.raises(ServerError) as failed, client.speech("Hello."):
            pass
    assert failed.value.status == 502
    assert (
        failed.value.message.startswith("HTTP 502 from ") and "Bad gateway" in failed.value.message
    )


def error(message: str, type: str, code: str) -> bytes:
    return json.dumps(
        {"error": {"message": message, "type": type, "param": None, "code": code}}
    ).encode()


async def test_a_full_queue_says_when_to_retry() -> None:
    # speechd's 429 (tests/api shows the server's side): OpenAI's shape and Retry-After.
    full = error("The synthesis queue is full.", "rate_limit_exceeded", "queue_full")
    answers = {"/v1/casts": Answer(429, full, {"retry-after": "7"})}
    with answering(answers) as url:
        async with AsyncClient(url) as client:
            with pytest.raises(RateLimited) as caught:
                await client.submit_cast("Hello.")
    assert (caught.value.status, caught.value.code, caught.value.retry_after) == (
        429,
        "queue_full",
        7,
    )
    assert caught.value.message == "The synthesis queue is full."


def test_no_worker_ready() -> None:
    busy = error("No worker is ready yet.", "server_error", "no_worker_ready")
    with (
        answering({"/v1/audio/speech": Answer(503, busy, {})}) as url,
        Client(url) as client,
        pytest.raises(Unavailable) as caught,
        client.speech("Hello."),
    ):
        pass
    assert caught.value.status == 503 and caught.value.code == "no_worker_ready"
