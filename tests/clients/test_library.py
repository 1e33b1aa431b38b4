"""`Client` and `AsyncClient` against a live server with a real worker (see conftest)."""

from __future__ import annotations

import http.server
import itertools
import threading
from collections.abc import Iterator

import pytest

from speechd_client import (
    AsyncClient,
    AuthenticationError,
    CastFailed,
    CastNotFound,
    Client,
    ServerError,
    ServerUnreachable,
    StreamInterrupted,
    UnexpectedResponse,
    UnknownVoice,
)
from tests.api._live import LiveServer, free_port

from ._support import audio_of, needs_cast_api
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


@needs_cast_api
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


@needs_cast_api
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


@needs_cast_api
def test_an_unknown_cast(client: Client) -> None:
    with pytest.raises(CastNotFound) as caught:
        client.cast_status("AAAAAAAAAAAAAAAAAAAAAA")
    assert caught.value.status == 404


@pytest.fixture
def not_speechd() -> Iterator[str]:
    """A web server that is not speechd: pages for GETs, a proxy's 502 page for POSTs."""

    class Pages(http.server.BaseHTTPRequestHandler):
        def _page(self, status: int) -> None:
            body = b"<html><body>Bad gateway, or a blog.</body></html>"
            self.send_response(status)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._page(200)

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            self._page(502)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_server_that_is_not_speechd(not_speechd: str) -> None:
    with Client(not_speechd) as client:
        with pytest.raises(UnexpectedResponse) as caught:
            client.voices()
        assert "not speechd's API" in caught.value.message
        with pytest.raises(ServerError) as failed, client.speech("Hello."):
            pass
    assert failed.value.status == 502
    assert (
        failed.value.message.startswith("HTTP 502 from ") and "Bad gateway" in failed.value.message
    )
