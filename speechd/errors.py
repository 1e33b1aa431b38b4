"""speechd's errors: one tree, each class knowing how it reads to a caller.

    SpeechdError                  500  server_error
    ├── InvalidRequest            400  invalid_request_error   (param names the field)
    │   ├── UnknownVoice          400  invalid_request_error   code=voice_not_found
    │   ├── VoiceUnavailable      400  invalid_request_error   code=voice_unavailable
    │   └── BadBook               400  invalid_request_error   code=bad_book (param=file)
    │       └── BookTooLarge      400  invalid_request_error   code=book_too_large
    │                                                          (limit: what was too big)
    ├── AuthenticationFailed      401  authentication_error    code=invalid_api_key
    ├── OriginNotAllowed          403  invalid_request_error   code=origin_not_allowed
    ├── NotFound                  404  invalid_request_error
    │   ├── ModelNotFound         404  invalid_request_error   code=model_not_found
    │   └── CastNotFound          404  invalid_request_error   code=cast_not_found
    ├── InputConflict             409  invalid_request_error   (seq: the input's next seq)
    │   ├── CastNotLive           409  invalid_request_error   code=cast_not_live
    │   ├── InputClosed           409  invalid_request_error   code=input_closed
    │   └── InputSeqMismatch      409  invalid_request_error   code=seq_mismatch
    ├── PayloadTooLarge           413  invalid_request_error   code=payload_too_large
    │   └── InputTooLong          413  invalid_request_error   code=input_too_long
    ├── UnsupportedMediaType      415  invalid_request_error   code=unsupported_media_type
    ├── RateLimited               429  rate_limit_exceeded     (retry_after seconds)
    │   ├── QueueFull             429  rate_limit_exceeded     code=queue_full
    │   └── TooManyStreams        429  rate_limit_exceeded     code=too_many_streams
    ├── CastFailed                500  server_error            code=cast_failed
    ├── ModelUnavailable          503  server_error            code=model_unavailable
    ├── Unavailable               503  server_error            code=no_worker_ready
    ├── ServerBusy                503  server_error            code=server_busy (retry_after)
    └── StoreUnavailable          503  server_error            code=store_unavailable
                                                               (retry_after)

`retry_after` (whole seconds, or None) becomes a `Retry-After` header.

Only `openai_compat` turns these into OpenAI's JSON shape; everything else raises them.
Errors of the store (`speechd.durable`), of torch or of sqlite are translated into this tree
where the library is called, chained with `raise ... from exc`.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "AuthenticationFailed",
    "BadBook",
    "BookNotFound",
    "BookNotReady",
    "BookTooLarge",
    "CastFailed",
    "CastNotFound",
    "CastNotLive",
    "InputClosed",
    "InputConflict",
    "InputSeqMismatch",
    "InputTooLong",
    "InvalidRequest",
    "ModelNotFound",
    "ModelUnavailable",
    "NotFound",
    "OriginNotAllowed",
    "PayloadTooLarge",
    "QueueFull",
    "RateLimited",
    "ServerBusy",
    "SpeechdError",
    "StoreUnavailable",
    "TooManyStreams",
    "Unavailable",
    "UnknownVoice",
    "UnsupportedMediaType",
    "VoiceUnavailable",
]


class SpeechdError(Exception):
    """Base of every error speechd reports to a caller."""

    status: ClassVar[int] = 500
    type: ClassVar[str] = "server_error"
    code: ClassVar[str | None] = None
    retry_after: int | None = None

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class InvalidRequest(SpeechdError):
    status = 400
    type = "invalid_request_error"


class UnknownVoice(InvalidRequest):
    code = "voice_not_found"

    def __init__(self, voice: str, available: list[str]) -> None:
        shown = ", ".join(available) if available else "none installed"
        asked = voice if len(voice) <= 80 else voice[:80] + "…"  # the message stays short
        super().__init__(f"Unknown voice {asked!r}. Available voices: {shown}.", param="voice")
        self.voice = voice
        self.available = available


class VoiceUnavailable(InvalidRequest):
    """The voice is installed, but no worker can speak its language (its G2P is missing)."""

    code = "voice_unavailable"

    def __init__(self, message: str) -> None:
        super().__init__(message, param="voice")


class BadBook(InvalidRequest):
    """A book (an EPUB, a Markdown or a plain-text document) that cannot be read: not the kind
    it was declared as, malformed, or refused for what it asks of a reader (a DTD's entities,
    a path outside the archive)."""

    code = "bad_book"

    def __init__(self, message: str) -> None:
        super().__init__(message, param="file")


class BookTooLarge(BadBook):
    """A book over one of its limits, refused before or as soon as it crosses it; `limit`
    names the limit (a field of `speechd.books.BookLimits`)."""

    code = "book_too_large"

    def __init__(self, message: str, *, limit: str) -> None:
        super().__init__(message)
        self.limit = limit


class AuthenticationFailed(SpeechdError):
    status = 401
    type = "authentication_error"
    code = "invalid_api_key"


class OriginNotAllowed(SpeechdError):
    """A browser sent this request from a page of another site (its `Origin`), and this
    server does not take requests from there (`--allowed-origin`)."""

    status = 403
    type = "invalid_request_error"
    code = "origin_not_allowed"


class NotFound(SpeechdError):
    status = 404
    type = "invalid_request_error"


class ModelNotFound(NotFound):
    code = "model_not_found"


class CastNotFound(NotFound):
    code = "cast_not_found"


class BookNotFound(NotFound):
    code = "book_not_found"


class BookNotReady(SpeechdError):
    """A book's file asked for before every chosen chapter is done."""

    status = 409
    type = "invalid_request_error"
    code = "book_not_ready"


class PayloadTooLarge(SpeechdError):
    status = 413
    type = "invalid_request_error"
    code = "payload_too_large"


class InputTooLong(PayloadTooLarge):
    """A live cast's input would grow past its total limit."""

    code = "input_too_long"


class UnsupportedMediaType(SpeechdError):
    """The request body is not declared as JSON (`Content-Type: application/json`)."""

    status = 415
    type = "invalid_request_error"
    code = "unsupported_media_type"


class InputConflict(SpeechdError):
    """A live cast's input cannot take this request as it stands; `seq` is the number of
    pieces it holds (the `seq` a client sends next), when known."""

    status = 409
    type = "invalid_request_error"

    def __init__(self, message: str, *, seq: int | None = None, param: str | None = None) -> None:
        super().__init__(message, param=param)
        self.seq = seq


class CastNotLive(InputConflict):
    code = "cast_not_live"


class InputClosed(InputConflict):
    """The input was closed (`done`, or idle past its timeout): nothing more can be added."""

    code = "input_closed"


class InputSeqMismatch(InputConflict):
    """The client's `seq` is not the number of pieces the input holds (a retry of a piece
    that was taken, or a piece sent before another one landed)."""

    code = "seq_mismatch"


class RateLimited(SpeechdError):
    status = 429
    type = "rate_limit_exceeded"
    code = "rate_limit_exceeded"

    def __init__(self, message: str, *, retry_after: int = 1, param: str | None = None) -> None:
        super().__init__(message, param=param)
        self.retry_after = retry_after


class QueueFull(RateLimited):
    code = "queue_full"


class TooManyStreams(RateLimited):
    """This client holds as many long-lived reads (SSE, long-polls, live audio, waiting
    speech requests) as it may."""

    code = "too_many_streams"


class CastFailed(SpeechdError):
    """The worker gave up on a cast (its stream ends in a terminal `error` record)."""

    code = "cast_failed"


class ModelUnavailable(SpeechdError):
    """The model could not be loaded (no weights, offline, bad folder)."""

    status = 503
    code = "model_unavailable"


class Unavailable(SpeechdError):
    """No worker is ready to synthesize (still loading, or none running)."""

    status = 503
    code = "no_worker_ready"


class ServerBusy(SpeechdError):
    """The api holds as many long-lived reads as it serves in all."""

    status = 503
    code = "server_busy"

    def __init__(self, message: str, *, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class StoreUnavailable(SpeechdError):
    """The store failed or could not be reached (`speechd.durable.DurableError`)."""

    status = 503
    code = "store_unavailable"

    def __init__(
        self,
        message: str = "The cast store is unavailable; try again shortly.",
        *,
        retry_after: int = 1,
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
