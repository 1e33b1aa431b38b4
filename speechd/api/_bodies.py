"""Request bodies decoded straight into their wire shape, in one pass.

Litestar's `data:` decodes a JSON body into Python objects first and converts them after, so
a 2.4 MB body of `[{}, {}, ...]` in a field nobody reads becomes 800,000 dicts (tens of MB and
tens of ms on the event loop) before the shape is checked. `BodyDecoder` hands the bytes to
msgspec with the target type, which checks each field's bounds as it goes and skips unknown
fields without building them: about ten times faster, and no memory beyond the shape itself.
Coercion is lax, as Litestar's is (`"1.5"` is a speed). Every failure is an `InvalidRequest`
in the words `_validation_error` uses, `param` naming the field; a body not declared as JSON
is an `UnsupportedMediaType` (415) before a byte of it is read.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import msgspec
from litestar import Request

from speechd.errors import InvalidRequest, UnsupportedMediaType

from ._errors import EMPTY_BODY, invalid_field

__all__ = ["BodyDecoder", "require_json"]

T = TypeVar("T")


def require_json(content_type: str | None) -> None:
    """Raise `UnsupportedMediaType` unless `content_type` is JSON (`application/json` or
    `application/...+json`, any parameters). A web page can send another site a `text/plain`
    or form POST without asking (a "simple" request); JSON it cannot, unless CORS says so."""
    kind = (content_type or "").partition(";")[0].strip().lower()
    if kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json")):
        return
    shown = kind[:80] or "none"
    raise UnsupportedMediaType(
        f"The request body must be JSON, sent with 'Content-Type: application/json' (it was"
        f" {shown})."
    )


class BodyDecoder(Generic[T]):
    """Decodes request bodies into `shape` (built once per route)."""

    def __init__(self, shape: type[T]) -> None:
        self._decoder = msgspec.json.Decoder(shape, strict=False)

    async def read(self, request: Request[Any, Any, Any]) -> T:
        """The request's body as `shape` (its size limit is the route's, a 413 above it); a
        body not declared as JSON is refused first (415), whatever it holds."""
        require_json(request.headers.get("content-type"))
        return self.decode(await request.body())

    def decode(self, raw: bytes) -> T:
        if not raw.strip():
            raise InvalidRequest(EMPTY_BODY)
        try:
            return self._decoder.decode(raw)
        except msgspec.ValidationError as exc:
            message, _, path = str(exc).partition(" - at `$")
            key = path.rstrip("`").lstrip(".") or None
            raise invalid_field(key, message) from None
        except msgspec.DecodeError as exc:
            detail = str(exc).removeprefix("JSON is malformed: ")
            raise InvalidRequest(
                f"We could not parse the JSON body of your request ({detail})."
            ) from None
        except RecursionError:  # nested deeper than the decoder goes: not a body we read
            raise InvalidRequest(
                "We could not parse the JSON body of your request (it is nested too deeply)."
            ) from None
