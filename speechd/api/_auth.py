"""API keys: a Litestar guard for the routes that make casts.

With no keys configured speechd is open (for local use). With keys, a guarded route needs
`Authorization: Bearer <key>`; the model and voice lists stay open, since Open WebUI reads them
without a key. The gateway's `POST /v1/casts` uses the same guard.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from typing import Any

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from speechd.errors import AuthenticationFailed

__all__ = ["ApiKeys", "require_api_key"]


class ApiKeys:
    """The keys one app accepts (kept on `app.state.api_keys`)."""

    def __init__(self, keys: Iterable[str] = ()) -> None:
        self._keys = tuple(k.encode() for k in keys if k)

    def __bool__(self) -> bool:
        return bool(self._keys)

    def check(self, authorization: str | None) -> None:
        """Raise `AuthenticationFailed` unless `authorization` is `Bearer <one of the keys>`."""
        if not self._keys:
            return
        scheme, _, token = (authorization or "").strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise AuthenticationFailed(
                "You didn't provide an API key. Send it as 'Authorization: Bearer <key>'."
            )
        given = token.encode()
        # Compare with every key, so the time taken says nothing about which one was close.
        matched = [hmac.compare_digest(given, key) for key in self._keys]
        if not any(matched):
            raise AuthenticationFailed("Incorrect API key provided.")


def require_api_key(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Guard: the request must carry one of `app.state.api_keys` (when any are set)."""
    keys: ApiKeys = connection.app.state.api_keys
    keys.check(connection.headers.get("authorization"))
