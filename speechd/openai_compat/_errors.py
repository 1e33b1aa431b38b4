"""Every error in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`.

The one place speechd's errors become HTTP. Handlers are layered from the most specific:

    ValidationException    400  the body (or a parameter) did not decode; `param` is its path
    NotFoundException      404  no such route
    MethodNotAllowed       405
    HTTPException          its status (a body that is not JSON, 413 for one over the limit)
    SpeechdError           the class's status, type and code; `param` from the instance
    Exception              500  a generic message; the trace is logged, never sent

`code` and `param` are strings or null, as the OpenAI SDK reads them; a live cast's input
conflict (409) adds `seq`, the number of pieces its input holds. A `RateLimited` error
carries `Retry-After`. After a streaming response has started these handlers cannot run: the
routes report such failures in-band (see `_speech.py`).
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
    PayloadTooLarge,
    RateLimited,
    SpeechdError,
)

__all__ = ["error_body", "error_body_for", "exception_handlers"]

log = logging.getLogger("speechd.api")

_MISSING_FIELD = re.compile(r"missing required field `([^`]+)`")
_GENERIC_500 = "The server had an error while processing your request."


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
    if isinstance(exc, RateLimited):
        headers["Retry-After"] = str(exc.retry_after)
    elif isinstance(exc, AuthenticationFailed):
        headers["WWW-Authenticate"] = "Bearer"
    if exc.status == 500:  # 503s (no worker yet) are expected while a worker starts
        log.warning("%s: %s", type(exc).__name__, exc.message)
    return _respond(exc.status, error_body_for(exc), headers)


def _validation_error(_: Request[Any, Any, Any], exc: ValidationException) -> Response[Any]:
    problems = exc.extra if isinstance(exc.extra, list) else []
    if not problems:
        return _respond(400, error_body(exc.detail, "invalid_request_error"))
    first = problems[0] if isinstance(problems[0], dict) else {}
    key = first.get("key")
    key = None if key in (None, "", "data") else str(key)
    message = str(first.get("message", exc.detail))
    missing = _MISSING_FIELD.search(message)
    if missing is not None:  # the path names the object; the field is the parameter
        key = f"{key}.{missing.group(1)}" if key else missing.group(1)
    if key is None:
        if message == "'data'":  # Litestar's words for an empty body
            message = "The request body is empty; send a JSON object."
        return _respond(400, error_body(message, "invalid_request_error"))
    return _respond(
        400, error_body(f"Invalid '{key}': {message}.", "invalid_request_error", param=key)
    )


def _not_found(request: Request[Any, Any, Any], _: NotFoundException) -> Response[Any]:
    return _respond(
        404,
        error_body(f"Invalid URL ({request.method} {request.url.path}).", "invalid_request_error"),
    )


def _method_not_allowed(
    request: Request[Any, Any, Any], exc: MethodNotAllowedException
) -> Response[Any]:
    return _respond(
        405,
        error_body(
            f"Method {request.method} is not allowed for {request.url.path}.",
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
