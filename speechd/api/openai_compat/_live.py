"""Live casts over HTTP: their creation (for the gateway's `POST /v1/casts` with `"live": true`)
and their input route.

    POST /v1/casts/{id}/input     {"text", "done"?, "seq"?}  ->  {"id", "seq", "chars", "done"}

The input route takes `Authorization: Bearer <input_token>`, or one of the server's API keys
when it has any. Its errors: 404 unknown id, 409 a cast that is not live / an input already
closed / a `seq` that does not match (the error object then carries the input's `seq`), 401
no or a wrong token, 413 a piece over `MAX_PIECE_CHARS` or an input past `MAX_LIVE_CHARS`,
400 control characters or an empty request. Dependency: `live_casts` (LiveCasts).
"""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, post
from litestar.connection import ASGIConnection
from litestar.di import NamedDependency
from litestar.params import FromPath

from speechd.errors import AuthenticationFailed
from speechd.service import LiveCast, LiveCasts, LiveRequest

from .._auth import ApiKeys, bearer_token
from .._bodies import BodyDecoder
from .._links import cast_url, input_url
from ._live_wire import MAX_INPUT_BODY_BYTES, InputAccepted, InputPiece, LiveCastCreated
from ._models import resolve_model

__all__ = ["append_input", "create_live", "key_ok", "live_created"]

_INPUT_BODY = BodyDecoder(InputPiece)


def key_ok(connection: ASGIConnection[Any, Any, Any, Any], authorization: str | None) -> bool:
    """Whether `authorization` carries one of the server's API keys (False when it has none:
    then only the input token writes an input)."""
    keys: ApiKeys = connection.app.state.api_keys
    if not keys:
        return False
    try:
        keys.check(authorization)
    except AuthenticationFailed:
        return False
    return True


async def create_live(live: LiveCasts, model: str | None, request: LiveRequest) -> LiveCast:
    """Make the live cast `request` asks for (its `model` checked first, as for any cast)."""
    resolve_model(model)
    return await live.create(request)


def live_created(cast: LiveCast, base_url: str) -> Response[LiveCastCreated]:
    """The 201 answer naming a new live cast and its input."""
    created = LiveCastCreated(
        id=cast.id,
        url=cast_url(base_url, cast.id),
        status="queued",
        input_url=input_url(base_url, cast.id),
        input_token=cast.token,
    )
    headers = {
        "X-Cast-Id": cast.id,
        "X-Cast-Url": created.url,
        "Cache-Control": "no-store",  # it holds the input token
    }
    return Response(created, status_code=201, headers=headers)


@post(
    "/casts/{cast_id:str}/input",
    status_code=200,
    request_max_body_size=MAX_INPUT_BODY_BYTES,
)
async def append_input(
    cast_id: FromPath[str],
    live_casts: NamedDependency[LiveCasts],
    request: Request[Any, Any, Any],
) -> InputAccepted:
    """Append a piece of a live cast's input (and close it with `done`)."""
    data = await _INPUT_BODY.read(request)
    authorization = request.headers.get("authorization")
    state = await live_casts.append(
        cast_id,
        data.text,
        done=data.done,
        seq=data.seq,
        token=bearer_token(authorization),
        key_ok=key_ok(request, authorization),
    )
    return InputAccepted(id=cast_id, seq=state.pieces, chars=state.chars, done=state.closed)
