"""The links the api hands out: the base they hang off (`public_base_url`), the headers that
name a cast in any response (`cast_headers`), and the links themselves, which every door
builds alike (`speechd.service`'s `cast_url`, `cast_api_url`, `input_url`, re-exported here
for the routes)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from litestar.connection import ASGIConnection

from speechd.config import Settings
from speechd.service import cast_api_url, cast_url, input_url

__all__ = [
    "UNSUPPORTED_HEADER",
    "cast_api_url",
    "cast_headers",
    "cast_url",
    "input_url",
    "public_base_url",
]

UNSUPPORTED_HEADER = "X-SSML-Unsupported"
_HEADER_UNSAFE = re.compile(r"[^A-Za-z0-9:._ -]")


def public_base_url(settings: Settings, connection: ASGIConnection[Any, Any, Any, Any]) -> str:
    """The base of the links speechd hands out (`--public-url`, else this request's host; a
    WebSocket's `ws`/`wss` read as `http`/`https`, since links are for browsers and HTTP
    clients), without a trailing slash."""
    if settings.public_url:
        return settings.public_url.rstrip("/")
    base = str(connection.base_url)
    if base.startswith("ws"):
        base = "http" + base.removeprefix("ws")
    return base.rstrip("/")


def cast_headers(
    base_url: str, cast_id: str, *, unsupported: Sequence[str] = ()
) -> dict[str, str]:
    """Headers that name a cast, so any client's audio response becomes a shareable link;
    and, where its SSML used elements outside the subset (spoken as their text), which
    (`X-SSML-Unsupported`, each named once)."""
    player, audio = cast_url("", cast_id), cast_api_url("", cast_id) + "/audio"
    headers = {
        "X-Cast-Id": cast_id,
        "X-Cast-Url": cast_url(base_url, cast_id),
        "Link": f'<{player}>; rel="alternate", <{audio}>; rel="enclosure"',
    }
    if unsupported:
        headers[UNSUPPORTED_HEADER] = ", ".join(
            _HEADER_UNSAFE.sub("?", name)[:64] for name in unsupported[:16]
        )
    return headers
