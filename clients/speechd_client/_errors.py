"""The client's errors: one tree, each saying in the caller's terms what went wrong.

    SpeechdClientError
    ├── TransportError            the conversation with the server broke
    │   ├── ServerUnreachable     nothing answers at the URL (refused, no such host, ...)
    │   ├── Timeout               the server stopped answering in time
    │   └── StreamInterrupted     a response ended before its end (a cast failed mid-way,
    │                             or the server stopped): what arrived is not a whole file
    ├── UnexpectedResponse        the answer is not speechd's API (another server at the URL?)
    └── APIError                  an error answer, in OpenAI's shape: .status .type .code .param
        ├── BadRequest            400
        │   └── UnknownVoice      400 voice_not_found (the message lists the voices)
        ├── AuthenticationError   401 (the message says how to pass a key)
        ├── NotFound              404
        │   └── CastNotFound      404 cast_not_found
        ├── Conflict              409 (.seq: the pieces a live cast's input holds)
        │   └── InputClosed       409 input_closed (done, or idle past its timeout)
        ├── RateLimited           429 (.retry_after seconds)
        └── ServerError           5xx
            ├── CastFailed        500 cast_failed
            └── Unavailable       503 (no worker ready yet)

httpx's errors are translated in one place (`transport_errors`), and error answers in one
(`error_from_response`); both chain the original with `from`.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator

import httpx
import msgspec

__all__ = [
    "APIError",
    "AuthenticationError",
    "BadRequest",
    "CastFailed",
    "CastNotFound",
    "Conflict",
    "InputClosed",
    "NotFound",
    "RateLimited",
    "ServerError",
    "ServerUnreachable",
    "SpeechdClientError",
    "StreamInterrupted",
    "Timeout",
    "TransportError",
    "Unavailable",
    "UnexpectedResponse",
    "UnknownVoice",
    "error_from_response",
    "transport_errors",
]

START_HINT = "start one with `speechd serve`, or pass the right URL (--url, SPEECHD_URL)"
KEY_FLAGS = "--api-key or SPEECHD_API_KEY (api_key= in Python)"


class SpeechdClientError(Exception):
    """Base of every error the client raises."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class TransportError(SpeechdClientError):
    pass


class ServerUnreachable(TransportError):
    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"speechd is not reachable at {url} ({reason}); {START_HINT}.")
        self.url = url


class Timeout(TransportError):
    pass


class StreamInterrupted(TransportError):
    pass


class UnexpectedResponse(SpeechdClientError):
    pass


class APIError(SpeechdClientError):
    """The server answered with an error status."""

    def __init__(
        self,
        message: str,
        *,
        status: int,
        type: str | None = None,
        code: str | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        self.code = code
        self.param = param


class BadRequest(APIError):
    pass


class UnknownVoice(BadRequest):
    pass


class AuthenticationError(APIError):
    pass


class NotFound(APIError):
    pass


class CastNotFound(NotFound):
    pass


class Conflict(APIError):
    """The request does not fit the state it met: a live cast's input that is closed, or a
    `seq` that is not the number of pieces it holds (then `.seq` is that number)."""

    seq: int | None = None


class InputClosed(Conflict):
    pass


class RateLimited(APIError):
    retry_after: float | None = None
    """Seconds the server asks to wait before trying again (its `Retry-After`)."""


class ServerError(APIError):
    pass


class CastFailed(ServerError):
    pass


class Unavailable(ServerError):
    pass


class _Detail(msgspec.Struct, frozen=True):
    message: str
    type: str | None = None
    param: str | None = None
    code: str | None = None
    seq: int | None = None


class _Body(msgspec.Struct, frozen=True):
    error: _Detail


_BY_CODE: dict[str, type[APIError]] = {
    "voice_not_found": UnknownVoice,
    "cast_not_found": CastNotFound,
    "cast_failed": CastFailed,
    "input_closed": InputClosed,
}
_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequest,
    401: AuthenticationError,
    404: NotFound,
    409: Conflict,
    429: RateLimited,
    503: Unavailable,
}
_body_decoder = msgspec.json.Decoder(_Body)


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return float(response.headers["retry-after"])
    except (KeyError, ValueError):
        return None


def error_from_response(response: httpx.Response) -> APIError:
    """The error an error answer (status >= 400, body read) stands for."""
    status = response.status_code
    try:
        detail = _body_decoder.decode(response.content).error
    except msgspec.DecodeError:  # not speechd's shape: a proxy's page, say
        snippet = " ".join(response.text.split())[:200] or response.reason_phrase
        detail = _Detail(f"HTTP {status} from {response.request.url}: {snippet}")
    cls = _BY_CODE.get(detail.code or "") or _BY_STATUS.get(status)
    if cls is None:
        cls = ServerError if status >= 500 else APIError
    message = detail.message
    if cls is AuthenticationError:
        if "authorization" in response.request.headers:
            message = f"{message} Check {KEY_FLAGS}."
        else:
            message = f"This server needs an API key: pass {KEY_FLAGS}."
    error = cls(message, status=status, type=detail.type, code=detail.code, param=detail.param)
    if isinstance(error, RateLimited):
        error.retry_after = _retry_after(response)
    if isinstance(error, Conflict):
        error.seq = detail.seq
    return error


@contextlib.contextmanager
def transport_errors(url: str, *, streaming: bool = False) -> Iterator[None]:
    """Translate httpx's transport errors met talking to `url`.

    `streaming`: the response has started, so a connection that breaks now cut it short.
    """
    try:
        yield
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise ServerUnreachable(url, _reason(exc)) from exc
    except httpx.TimeoutException as exc:
        raise Timeout(f"speechd at {url} did not answer in time ({_reason(exc)}).") from exc
    except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
        if streaming:
            raise StreamInterrupted(
                f"The response from {url} ended early ({_reason(exc)}): the cast failed "
                "or the server stopped; what arrived is incomplete."
            ) from exc
        raise TransportError(f"The connection to {url} broke ({_reason(exc)}).") from exc
    except httpx.TransportError as exc:
        raise TransportError(f"Talking to {url} failed ({_reason(exc)}).") from exc


def _reason(exc: BaseException) -> str:
    # The OS's words ("connection refused") sit under httpx's and anyio's wrappers ("All
    # connection attempts failed"); asyncio keeps only the errno ("Connect call failed").
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, socket.gaierror) and cause.strerror:
            return cause.strerror.lower()
        if isinstance(cause, OSError) and cause.errno and cause.errno > 0:
            return os.strerror(cause.errno).lower()
        cause = cause.__cause__ or cause.__context__
    return str(exc).strip() or type(exc).__name__
