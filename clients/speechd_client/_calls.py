"""The requests the clients make and how their answers decode; no I/O here, so `Client` and
`AsyncClient` share everything but the sending."""

from __future__ import annotations

import os
from typing import Any, NamedTuple, TypeVar
from urllib.parse import quote

import httpx
import msgspec

from ._errors import UnexpectedResponse
from ._version import __version__
from ._wire import (
    AudioFormat,
    BookView,
    CastCreated,
    CastView,
    InputAccepted,
    LiveCastCreated,
    RecordsPage,
    RecordsView,
    Start,
    Voice,
    VoiceList,
    records_page,
)

__all__ = [
    "CAPTION_FORMATS",
    "DEFAULT_TIMEOUT",
    "DEFAULT_URL",
    "MAX_SPEECH_CHARS",
    "Call",
    "base_url_from",
    "captions",
    "captions_of",
    "cast_audio",
    "cast_created",
    "cast_status",
    "cast_view",
    "headers_for",
    "input_accepted",
    "live_cast",
    "live_cast_created",
    "live_input",
    "records",
    "records_of",
    "speech",
    "submit_cast",
    "timeout_for",
    "voices",
    "voices_of",
]

T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT = 120.0
"""Seconds to wait for each answer (or each piece of a streamed one). Generous: on a busy CPU
box a cast may wait its turn before its first audio."""
CAPTION_FORMATS = ("vtt", "srt")
"""The subtitle files a cast's captions come as: WebVTT (with each word's start) and SubRip."""
MAX_SPEECH_CHARS = 4096
"""The longest input `/v1/audio/speech` takes (OpenAI's limit); `/v1/casts` takes far more."""
_CONNECT_TIMEOUT = 10.0


class Call(NamedTuple):
    method: str
    path: str
    json: dict[str, Any] | None = None
    params: dict[str, Any] | None = None
    wait: float = 0.0
    """A long-poll: the server may hold the answer this long before it starts."""
    headers: dict[str, str] | None = None
    """Headers of this call's own (a live cast's input token instead of the API key)."""
    content: bytes | None = None
    """A body that is not JSON (a book's file), sent as it is."""


def base_url_from(url: str | None) -> str:
    """The server's root URL: `url`, else $SPEECHD_URL, else the default; a trailing `/v1`
    (the form OpenAI clients want) is accepted and dropped."""
    root = (url or os.environ.get("SPEECHD_URL") or DEFAULT_URL).rstrip("/")
    return root.removesuffix("/v1")


def headers_for(api_key: str | None) -> dict[str, str]:
    headers = {"user-agent": f"speechd-client/{__version__}"}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    return headers


def timeout_for(call: Call, timeout: float) -> httpx.Timeout:
    return httpx.Timeout(timeout + call.wait, connect=min(timeout, _CONNECT_TIMEOUT))


def _request_body(input: str, **fields: object) -> dict[str, Any]:
    """A JSON body with the fields that are set: the server applies its own defaults."""
    return {"input": input, **{k: v for k, v in fields.items() if v is not None}}


def _cast_path(cast_id: str, tail: str = "") -> str:
    return f"/v1/casts/{quote(cast_id, safe='')}{tail}"


def speech(
    input: str,
    *,
    voice: str | None,
    model: str | None,
    speed: float | None,
    response_format: AudioFormat | None,
    start: Start | None = None,
) -> Call:
    body = _request_body(
        input,
        voice=voice,
        model=model,
        speed=speed,
        response_format=response_format,
        start=start,
    )
    return Call("POST", "/v1/audio/speech", json=body)


def submit_cast(
    input: str,
    *,
    voice: str | None,
    model: str | None,
    speed: float | None,
    response_format: AudioFormat | None,
    title: str | None,
) -> Call:
    body = _request_body(
        input, voice=voice, model=model, speed=speed, response_format=response_format, title=title
    )
    return Call("POST", "/v1/casts", json=body)


def live_cast(
    input: str,
    *,
    voice: str | None,
    model: str | None,
    speed: float | None,
    response_format: AudioFormat | None,
    title: str | None,
) -> Call:
    body = _request_body(
        input, voice=voice, model=model, speed=speed, response_format=response_format, title=title
    )
    return Call("POST", "/v1/casts", json={**body, "live": True})


def live_input(cast_id: str, token: str, text: str, *, done: bool, seq: int | None) -> Call:
    body: dict[str, Any] = {"text": text, "done": done}
    if seq is not None:
        body["seq"] = seq
    headers = {"authorization": f"Bearer {token}"}
    return Call("POST", _cast_path(cast_id, "/input"), json=body, headers=headers)


def cast_status(cast_id: str) -> Call:
    return Call("GET", _cast_path(cast_id))


def cast_audio(cast_id: str) -> Call:
    return Call("GET", _cast_path(cast_id, "/audio"))


def captions(cast_id: str, fmt: str) -> Call:
    if fmt not in CAPTION_FORMATS:
        raise ValueError(f"captions come as {' or '.join(CAPTION_FORMATS)}, not {fmt!r}")
    return Call("GET", _cast_path(cast_id, f"/captions.{fmt}"))


def records(cast_id: str, *, seq_num: int, wait: float, max_records: int | None) -> Call:
    params: dict[str, Any] = {"seq_num": seq_num, "wait": wait}
    if max_records is not None:
        params["max_records"] = max_records
    return Call("GET", _cast_path(cast_id, "/records"), params=params, wait=wait)


BOOK_TYPES = {
    ".epub": "application/epub+zip",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".txt": "text/plain",
}
"""A book file's media type, by its name's suffix."""


def create_book(
    data: bytes,
    content_type: str,
    *,
    voice: str | None,
    speed: float | None,
    format: str | None,
    chapters: str | None,
    chapter_voices: str | None = None,
    chapter_speeds: str | None = None,
) -> Call:
    params = {
        "voice": voice,
        "speed": speed,
        "format": format,
        "chapters": chapters,
        "chapter_voices": chapter_voices,
        "chapter_speeds": chapter_speeds,
    }
    return Call(
        "POST",
        "/v1/books",
        params={k: v for k, v in params.items() if v is not None},
        headers={"content-type": content_type},
        content=data,
    )


def book_status(book_id: str) -> Call:
    return Call("GET", f"/v1/books/{quote(book_id, safe='')}")


def book_audio(book_id: str, fmt: str) -> Call:
    return Call("GET", f"/v1/books/{quote(book_id, safe='')}/audio.{fmt}")


def book_view(response: httpx.Response) -> BookView:
    return _decode(response, BookView)


def voices() -> Call:
    return Call("GET", "/v1/audio/voices")


def _decode(response: httpx.Response, kind: type[T]) -> T:
    try:
        return msgspec.json.decode(response.content, type=kind)
    except msgspec.DecodeError as exc:
        raise UnexpectedResponse(
            f"{response.request.url} answered something that is not speechd's API ({exc}); "
            "is speechd the server at this URL?"
        ) from exc


def cast_created(response: httpx.Response) -> CastCreated:
    return _decode(response, CastCreated)


def live_cast_created(response: httpx.Response) -> LiveCastCreated:
    return _decode(response, LiveCastCreated)


def input_accepted(response: httpx.Response) -> InputAccepted:
    return _decode(response, InputAccepted)


def cast_view(response: httpx.Response) -> CastView:
    return _decode(response, CastView)


def records_of(response: httpx.Response) -> RecordsPage:
    return records_page(_decode(response, RecordsView))


def captions_of(response: httpx.Response) -> str:
    kind = response.headers.get("content-type", "")
    if not kind.startswith(("text/vtt", "application/x-subrip")):
        raise UnexpectedResponse(
            f"{response.request.url} answered {kind or 'no content type'}, not subtitles; "
            "is speechd the server at this URL?"
        )
    return response.content.decode("utf-8", "replace")


def voices_of(response: httpx.Response) -> list[Voice]:
    return _decode(response, VoiceList).voices
