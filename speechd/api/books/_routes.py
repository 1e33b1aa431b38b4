"""The book routes. Each reads its request, calls the injected `BookService`, returns.

    POST /v1/books                          a book (see `_upload`); 201 with its status, 200
                                            when the same upload made it already
    GET  /v1/books/{id}                     its status: chapters, progress, ETA
    POST /v1/books/{id}/cancel              stop making it
    GET  /v1/books/{id}/chapters/{n}        chapter n's cast, made at listener priority from
                                            now: a 303 to its audio (`?to=player`: its page)
    GET  /v1/books/{id}/audio.m4b           the whole book, once done: AAC in MP4 with chapter
    GET  /v1/books/{id}/audio.mp3           marks, tags and cover (an m4b book), or mp3 with
                                            ID3v2 CHAP/CTOC (an mp3 book); its size and a
                                            strong etag up front, byte ranges (`Range`,
                                            `If-Range`, `If-None-Match`) as a done cast's audio

A chapter is a cast: its status, audio, captions and words are the cast routes'
(`/v1/casts/{cast}`...), named by each chapter's `cast` in the status. Errors are OpenAI's
shape, as on every `/v1` route (`speechd.api._errors`).
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from litestar import Request, Response, Router, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, HeaderParameter
from litestar.response import Stream
from litestar.status_codes import HTTP_303_SEE_OTHER

from speechd.books import BookLimits
from speechd.config import Settings
from speechd.service import BookService, BookStatus, cast_api_url, cast_url

from .._auth import require_api_key, sharing_scope
from .._links import public_base_url
from .._ranges import AudioReply, file_reply
from ._upload import book_request, media_type, split_form

__all__ = ["MAX_BOOK_BODY_BYTES", "books_router"]

MAX_BOOK_BODY_BYTES = BookLimits().max_bytes + 64 * 1024
"""The largest body `POST /v1/books` reads: a book's upload limit, plus a form's own bytes."""


@post(
    "/books",
    guards=[require_api_key],
    status_code=201,
    request_max_body_size=MAX_BOOK_BODY_BYTES,
)
async def create_book(
    request: Request[Any, Any, Any],
    books: NamedDependency[BookService],
    settings: NamedDependency[Settings],
) -> Response[BookStatus]:
    """Read the upload into chapters and make them in the background (see `_upload`)."""
    content_type = request.headers.get("content-type")
    scope = sharing_scope(request)
    if media_type(content_type) == "multipart/form-data":
        body = await request.body()
        asked = await asyncio.to_thread(split_form, body, content_type, scope=scope)
    else:
        # The media type is checked before the body is read.
        book_request(b"", content_type, {}, scope=scope)
        asked = book_request(
            await request.body(), content_type, dict(request.query_params), scope=scope
        )
    status = await books.create(asked)
    base = public_base_url(settings, request)
    return Response(
        status,
        status_code=201 if status.created else 200,
        headers={"location": f"{base}/v1/books/{status.id}"},
    )


@get("/books/{book_id:str}")
async def get_book(book_id: FromPath[str], books: NamedDependency[BookService]) -> BookStatus:
    return await books.status(book_id)


@post("/books/{book_id:str}/cancel", guards=[require_api_key], status_code=200)
async def cancel_book(book_id: FromPath[str], books: NamedDependency[BookService]) -> BookStatus:
    return await books.cancel(book_id)


@get("/books/{book_id:str}/chapters/{number:int}")
async def open_chapter(
    book_id: FromPath[str],
    number: FromPath[int],
    books: NamedDependency[BookService],
    settings: NamedDependency[Settings],
    request: Request[Any, Any, Any],
) -> Response[None]:
    """Someone opens chapter `number`: it is made at listener priority from now on."""
    cast = await books.listen(book_id, number)
    base = public_base_url(settings, request)
    to = request.query_params.get("to")
    where = cast_url(base, cast) if to == "player" else f"{cast_api_url(base, cast)}/audio"
    return Response(None, status_code=HTTP_303_SEE_OTHER, headers={"location": where})


_RangeHeader = Annotated[str | None, HeaderParameter(name="range")]
_IfNoneMatch = Annotated[str | None, HeaderParameter(name="if-none-match")]
_IfRange = Annotated[str | None, HeaderParameter(name="if-range")]


@get("/books/{book_id:str}/audio.m4b")
async def book_m4b(
    book_id: FromPath[str],
    books: NamedDependency[BookService],
    range_header: _RangeHeader = None,
    if_none_match: _IfNoneMatch = None,
    if_range: _IfRange = None,
) -> Response[Any]:
    return await _book_file(books, book_id, "m4b", range_header, if_none_match, if_range)


@get("/books/{book_id:str}/audio.mp3")
async def book_mp3(
    book_id: FromPath[str],
    books: NamedDependency[BookService],
    range_header: _RangeHeader = None,
    if_none_match: _IfNoneMatch = None,
    if_range: _IfRange = None,
) -> Response[Any]:
    return await _book_file(books, book_id, "mp3", range_header, if_none_match, if_range)


async def _book_file(
    books: BookService,
    book_id: str,
    fmt: str,
    range_header: str | None,
    if_none_match: str | None,
    if_range: str | None,
) -> Response[Any]:
    """The book's whole file, or the range asked for: planned before its first byte (its size
    and etag are known), so a player seeks in it and a broken download goes on."""
    file = await books.audiobook(book_id, fmt)
    base = {
        "content-type": file.plan.media_type,
        "content-disposition": f'attachment; filename="{book_id}.{fmt}"',
    }
    reply = file_reply(file.plan.size, file.etag, base, range_header, if_none_match, if_range)
    if isinstance(reply, AudioReply):
        return Response(reply.body, status_code=reply.status, headers=reply.headers)
    return Stream(
        books.audiobook_bytes(file, reply.start, reply.stop),
        status_code=reply.status,
        media_type=file.plan.media_type,
        headers=reply.headers,
    )


books_router = Router(
    path="/v1",
    route_handlers=[create_book, get_book, cancel_book, open_chapter, book_m4b, book_mp3],
)
"""Every book route, under `/v1`."""
