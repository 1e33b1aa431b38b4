"""The gateway's routes: thin handlers over the injected `gateway` (a `Gateway`), with the
app's `settings` (links) and `metrics` (submissions).

A cast's captions are assembled (cues, text, JSON) on a worker thread: for a 200,000-character
cast that is tens of thousands of words, a tenth of a second or more of CPU that the event
loop, and every other request on it, would otherwise wait out; and once per change of the
words (`Rendered`), not once per request."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any

import msgspec
from litestar import MediaType, Request, Response, Router, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, HeaderParameter, QueryParameter

from speechd.casts import CastCaptions
from speechd.config import Settings
from speechd.errors import BookNotFound
from speechd.limits import MAX_SEQ_NUM
from speechd.service import BookService, LiveCasts

from .._auth import require_api_key, sharing_scope
from .._bodies import BodyDecoder
from .._links import cast_headers, cast_url, public_base_url
from .._ranges import AudioReply
from .._streaming import AppResponse, StreamApp
from ..metrics import ApiMetrics
from ..openai_compat import create_live, live_created
from ._captions import srt, webvtt, words_page
from ._gateway import Gateway
from ._pages import (
    PAGE_HEADERS,
    book_page,
    missing_page,
    paste_page,
    player_page,
    static_file,
)
from ._wire import MAX_CAST_BODY_BYTES, CastCreated, CastView, NewCast, RecordsPage

__all__ = ["gateway_router"]

SeqNum = Annotated[int, QueryParameter(ge=0, le=MAX_SEQ_NUM)]
_NEW_CAST = BodyDecoder(NewCast)


def _reply(result: StreamApp | AudioReply) -> Response[Any]:
    if isinstance(result, AudioReply):
        return Response(result.body, status_code=result.status, headers=result.headers)
    return AppResponse(result)


@post(
    "/v1/casts",
    guards=[require_api_key],
    status_code=201,
    request_max_body_size=MAX_CAST_BODY_BYTES,
)
async def create_cast(
    gateway: NamedDependency[Gateway],
    settings: NamedDependency[Settings],
    metrics: NamedDependency[ApiMetrics],
    live_casts: NamedDependency[LiveCasts],
    request: Request[Any, Any, Any],
) -> Response[Any]:
    """Submit a cast and answer at once with its link (201; 200 for an identical request).
    A live one (`"live": true`) answers 201 with its input's link and token too."""
    data = await _NEW_CAST.read(request)
    if data.live:
        made = await create_live(live_casts, data.model, data.to_live_request())
        metrics.submitted(True)
        return live_created(made, public_base_url(settings, request))
    cast, state = await gateway.create(data, scope=sharing_scope(request))
    metrics.submitted(cast.created)
    base_url = public_base_url(settings, request)
    created = CastCreated(cast.id, cast_url(base_url, cast.id), state.value)
    return Response(
        created,
        status_code=201 if cast.created else 200,
        headers=cast_headers(base_url, cast.id, unsupported=cast.unsupported),
    )


@get("/v1/casts/{cast_id:str}")
async def get_cast(
    cast_id: FromPath[str],
    gateway: NamedDependency[Gateway],
    settings: NamedDependency[Settings],
    request: Request[Any, Any, Any],
) -> CastView:
    gateway.admit(request)
    return await gateway.view(cast_id, public_base_url(settings, request))


@get("/v1/casts/{cast_id:str}/records")
async def get_records(
    cast_id: FromPath[str],
    gateway: NamedDependency[Gateway],
    request: Request[Any, Any, Any],
    seq_num: SeqNum = 0,
    wait: Annotated[float, QueryParameter(ge=0)] = 0.0,
    max_records: Annotated[int | None, QueryParameter(ge=1)] = None,
) -> Response[RecordsPage]:
    gateway.admit(request)
    page = await gateway.records(cast_id, seq_num, wait, max_records, request=request)
    return Response(page, headers={"cache-control": "no-store"})


@get("/v1/casts/{cast_id:str}/events")
async def get_events(
    cast_id: FromPath[str],
    gateway: NamedDependency[Gateway],
    request: Request[Any, Any, Any],
    seq_num: Annotated[int | None, QueryParameter(ge=0, le=MAX_SEQ_NUM)] = None,
    last_event_id: Annotated[str | None, HeaderParameter(name="last-event-id")] = None,
) -> Response[Any]:
    gateway.admit(request)
    stream = await gateway.events(cast_id, seq_num, last_event_id, request=request)
    if stream is None:  # a finished cast, read to its end: 204 tells EventSource to stop
        return Response(b"", status_code=204)
    return AppResponse(stream)


@get("/v1/casts/{cast_id:str}/audio")
async def get_audio(
    cast_id: FromPath[str],
    gateway: NamedDependency[Gateway],
    request: Request[Any, Any, Any],
    range_header: Annotated[str | None, HeaderParameter(name="range")] = None,
    if_none_match: Annotated[str | None, HeaderParameter(name="if-none-match")] = None,
    if_range: Annotated[str | None, HeaderParameter(name="if-range")] = None,
) -> Response[Any]:
    gateway.admit(request)
    result = await gateway.audio(
        cast_id,
        range_header=range_header,
        if_none_match=if_none_match,
        if_range=if_range,
        request=request,
    )
    return _reply(result)


def _caption_headers(cast_id: str, state: str, suffix: str) -> dict[str, str]:
    done = state == "done"
    return {
        "cache-control": "public, max-age=86400" if done else "no-store",
        "content-disposition": f'inline; filename="{cast_id}.{suffix}"',
        "x-cast-status": state,
    }


async def _rendered(
    gateway: Gateway, cast_id: str, kind: str, make: Callable[[str, CastCaptions], bytes]
) -> tuple[str, bytes]:
    """The cast's state, and its words made into `kind` by `make` (off the loop, and once
    for as long as the words and the state stay what they were)."""
    status, captions = await gateway.captions(cast_id)
    state = status.state.value
    version = (captions.born_ms, len(captions.words), captions.audio_ms, state)
    body = await gateway.rendered.get(
        cast_id, kind, version, functools.partial(make, state, captions)
    )
    return state, body


def _vtt(cast_id: str, state: str, captions: CastCaptions) -> bytes:
    return webvtt(captions).encode()


def _srt(cast_id: str, state: str, captions: CastCaptions) -> bytes:
    return srt(captions).encode()


def _words_json(cast_id: str, state: str, captions: CastCaptions) -> bytes:
    return msgspec.json.encode(words_page(cast_id, state, captions))


@get("/v1/casts/{cast_id:str}/captions.vtt")
async def get_captions_vtt(
    cast_id: FromPath[str], gateway: NamedDependency[Gateway], request: Request[Any, Any, Any]
) -> Response[bytes]:
    """The cast's words as WebVTT (cast-level times; a live cast: what exists so far)."""
    gateway.admit(request)
    state, body = await _rendered(gateway, cast_id, "vtt", functools.partial(_vtt, cast_id))
    return Response(body, media_type="text/vtt", headers=_caption_headers(cast_id, state, "vtt"))


@get("/v1/casts/{cast_id:str}/captions.srt")
async def get_captions_srt(
    cast_id: FromPath[str], gateway: NamedDependency[Gateway], request: Request[Any, Any, Any]
) -> Response[bytes]:
    """The cast's words as SubRip (cast-level times; a live cast: what exists so far)."""
    gateway.admit(request)
    state, body = await _rendered(gateway, cast_id, "srt", functools.partial(_srt, cast_id))
    return Response(
        body,
        media_type="application/x-subrip; charset=utf-8",
        headers=_caption_headers(cast_id, state, "srt"),
    )


@get("/v1/casts/{cast_id:str}/words")
async def get_words(
    cast_id: FromPath[str], gateway: NamedDependency[Gateway], request: Request[Any, Any, Any]
) -> Response[bytes]:
    """The cast's words with their start and end in seconds of the cast's audio (a
    `WordsPage`, encoded off the loop)."""
    gateway.admit(request)
    state, body = await _rendered(
        gateway, cast_id, "words", functools.partial(_words_json, cast_id)
    )
    headers = _caption_headers(cast_id, state, "json")
    del headers["content-disposition"]
    return Response(body, media_type=MediaType.JSON, headers=headers)


@get("/", media_type=MediaType.HTML, include_in_schema=False)
async def paste() -> Response[str]:
    return Response(paste_page(), media_type=MediaType.HTML, headers=PAGE_HEADERS)


@get("/c/{cast_id:str}", media_type=MediaType.HTML, include_in_schema=False)
async def player(
    cast_id: FromPath[str], gateway: NamedDependency[Gateway], request: Request[Any, Any, Any]
) -> Response[str]:
    gateway.admit(request)
    meta = await gateway.meta(cast_id)
    if meta is None:
        return Response(
            missing_page(), status_code=404, media_type=MediaType.HTML, headers=PAGE_HEADERS
        )
    return Response(
        player_page(cast_id, meta.title), media_type=MediaType.HTML, headers=PAGE_HEADERS
    )


@get("/b/{book_id:str}", media_type=MediaType.HTML, include_in_schema=False)
async def book_player(book_id: FromPath[str], books: NamedDependency[BookService]) -> Response[str]:
    """A book's page: its chapters, each opening the chapter's player (`static/book.js`)."""
    try:
        title = await books.title(book_id)
    except BookNotFound:
        return Response(
            missing_page("book"), status_code=404, media_type=MediaType.HTML, headers=PAGE_HEADERS
        )
    return Response(book_page(book_id, title), media_type=MediaType.HTML, headers=PAGE_HEADERS)


@get("/static/{name:str}", include_in_schema=False)
async def static(name: FromPath[str]) -> Response[bytes]:
    found = static_file(name)
    if found is None:
        return Response(b"Not found", status_code=404, media_type=MediaType.TEXT)
    data, kind = found
    return Response(
        data,
        media_type=kind,
        headers={"cache-control": "public, max-age=300", "x-content-type-options": "nosniff"},
    )


def gateway_router(path: str = "/") -> Router:
    """The gateway's routes. The app provides the dependency `gateway` (a `Gateway`)."""
    return Router(
        path,
        route_handlers=[
            create_cast,
            get_cast,
            get_records,
            get_events,
            get_audio,
            get_captions_vtt,
            get_captions_srt,
            book_player,
            get_words,
            paste,
            player,
            static,
        ],
    )
