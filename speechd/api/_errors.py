"""Every error in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`.

The one place speechd's errors become HTTP. Handlers are layered from the most specific:

    ValidationException    400  the body (or a parameter) did not decode; `param` is its path
    NotFoundException      404  no such route
    MethodNotAllowed       405
    HTTPException          its status (a body that is not JSON, 413 for one over the limit)
    SpeechdError           the class's status, type and code; `param` from the instance
                           (the store failing is the service's `StoreUnavailable`: 503
                           store_unavailable, its one log line written by the service)
    Exception              500  a generic message; the trace is logged, never sent

`code` and `param` are strings or null, as the OpenAI SDK reads them; a live cast's input
conflict (409) adds `seq`, the number of pieces its input holds. An error with a
`retry_after` (429s, the 503s of a busy api or store) carries `Retry-After`. After a streaming
response has started these handlers cannot run: the routes report such failures in-band or
end the body incomplete (see `_speech.py`), with one log line.

`invalid_field` is the one 400 for a body that does not fit its shape, whichever decoder
found it (Litestar's, or `BodyDecoder`'s).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from litestar import Request, Response
from litestar.exceptions import (
    HTTPException,
    MethodNotAllowedException,
    NotFoundException,
    SerializationException,
    ValidationException,
)
from litestar.types import ExceptionHandlersMap

from speechd.errors import (
    AuthenticationFailed,
    InputConflict,
    InvalidRequest,
    PayloadTooLarge,
    SpeechdError,
)

__all__ = [
    "EMPTY_BODY",
    "error_body",
    "error_body_for",
    "exception_handlers",
    "invalid_field",
]

log = logging.getLogger("speechd.api")

_MISSING_FIELD = re.compile(r"missing required field `([^`]+)`")
_GENERIC_500 = "The server had an error while processing your request."
EMPTY_BODY = "The request body is empty; send a JSON object."


def error_body(
    message: str, type: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def error_body_for(exc: SpeechdError) -> dict[str, Any]:
    body = error_body(exc.message, exc.type, param=exc.param, code=exc.code)
    if isinstance(exc, InputConflict) and exc.seq is not None:
        body["error"]["seq"] = exc.seq  # what a live cast's writer sends as `seq` next
    return body


def _respond(
    status: int, body: dict[str, Any], headers: dict[str, str] | None = None
) -> Response[Any]:
    return Response(body, status_code=status, headers=headers)


def _speechd_error(_: Request[Any, Any, Any], exc: SpeechdError) -> Response[Any]:
    headers: dict[str, str] = {}
    if exc.retry_after is not None:
        headers["Retry-After"] = str(exc.retry_after)
    if isinstance(exc, AuthenticationFailed):
        headers["WWW-Authenticate"] = "Bearer"
    if exc.status == 500:  # 503s (no worker yet) are expected while a worker starts
        log.warning("%s: %s", type(exc).__name__, exc.message)
    return _respond(exc.status, error_body_for(exc), headers)


def invalid_field(key: str | None, message: str) -> InvalidRequest:
    """The 400 for a body that did not decode into its shape: msgspec's `message` about the
    field at `key` (a path like `voice.id`; None: the body itself)."""
    missing = _MISSING_FIELD.search(message)
    if missing is not None:  # the path names the object; the field is the parameter
        key = f"{key}.{missing.group(1)}" if key else missing.group(1)
    longest = message.removeprefix("Expected `str` of length <= ")
    if longest != message and longest.isdigit():  # msgspec's words for a bound on a field
        message = f"it is longer than {longest} characters"
    if key is None:
        return InvalidRequest(message)
    return InvalidRequest(f"Invalid '{key}': {message}.", param=key)


def _validation_error(_: Request[Any, Any, Any], exc: ValidationException) -> Response[Any]:
    problems = exc.extra if isinstance(exc.extra, list) else []
    if not problems:
        return _respond(400, error_body(exc.detail, "invalid_request_error"))
    first = problems[0] if isinstance(problems[0], dict) else {}
    key = first.get("key")
    key = None if key in (None, "", "data") else str(key)
    message = str(first.get("message", exc.detail))
    if key is None and message == "'data'":  # Litestar's words for an empty body
        message = EMPTY_BODY
    return _respond(400, error_body_for(invalid_field(key, message)))


def _shown(text: str, limit: int = 200) -> str:
    """`text` as an error message may echo it: at most `limit` characters."""
    return text if len(text) <= limit else text[:limit] + "…"


def _not_found(request: Request[Any, Any, Any], _: NotFoundException) -> Response[Any]:
    what = f"{_shown(request.method, 20)} {_shown(request.url.path)}"
    return _respond(404, error_body(f"Invalid URL ({what}).", "invalid_request_error"))


def _method_not_allowed(
    request: Request[Any, Any, Any], exc: MethodNotAllowedException
) -> Response[Any]:
    return _respond(
        405,
        error_body(
            f"Method {_shown(request.method, 20)} is not allowed for {_shown(request.url.path)}.",
            "invalid_request_error",
        ),
        {k: v for k, v in (exc.headers or {}).items() if k.lower() == "allow"},
    )


def _http_error(_: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    status = exc.status_code
    if status == PayloadTooLarge.status:
        too_large = PayloadTooLarge("The request body is too large.")
        return _respond(status, error_body_for(too_large))
    if isinstance(exc.__cause__, SerializationException):  # the body is not JSON
        detail = exc.detail.removeprefix("JSON is malformed: ")
        message = f"We could not parse the JSON body of your request ({detail})."
        return _respond(status, error_body(message, "invalid_request_error"))
    if status >= 500:
        log.error("framework error %s: %s", status, exc.detail)
        return _respond(status, error_body(_GENERIC_500, "server_error"))
    return _respond(status, error_body(exc.detail, "invalid_request_error"))


def _internal_error(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    log.error("unhandled error in %s %s", request.method, request.url.path, exc_info=exc)
    return _respond(500, error_body(_GENERIC_500, "server_error"))


exception_handlers: ExceptionHandlersMap = {
    ValidationException: _validation_error,
    NotFoundException: _not_found,
    MethodNotAllowedException: _method_not_allowed,
    HTTPException: _http_error,
    SpeechdError: _speechd_error,
    Exception: _internal_error,
}
"""The app's exception map, from the framework's errors to the catch-all."""
