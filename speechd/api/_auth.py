"""Who may make casts: API keys (a guard on the routes that make casts), and the web pages a
browser may send requests from (`Origins`, a guard on every route); and the bearer token a
live cast's input route reads (`bearer_token`).

With no keys configured speechd is open (for local use). With keys, a guarded route needs
`Authorization: Bearer <key>`; the model and voice lists stay open, since Open WebUI reads them
without a key. The gateway's `POST /v1/casts` uses the same guard. With `--share-casts
per-key`, the casts a key's callers make are theirs alone (`sharing_scope`).

**Origins.** A keyless speechd on 127.0.0.1 would otherwise take a POST from any web page its
user visits (a form or `fetch` needs no permission to send one), and a WebSocket from anywhere.
Browsers say which page a request comes from in `Origin`; a POST (any method but GET, HEAD
and OPTIONS) or a WebSocket that carries one must come from the server itself (its `Host`, or
`--public-url`'s origin behind a proxy) or from an origin `--allowed-origin` names (`*`: any),
else 403 (`origin_not_allowed`) and the WebSocket is refused. Requests without an `Origin`
(curl, the SDKs, Open WebUI's server) are not browsers' and pass. JSON bodies must say so
(`Content-Type: application/json`, `_bodies`), which no page can send across sites without
CORS's consent, and CORS is on only for `--allowed-origin`'s origins.

**Host names.** "The server itself" is judged by `Host`, which a page can choose: a name the
attacker owns, made to resolve to 127.0.0.1 after the page loaded (DNS rebinding), sends
`Origin` and `Host` both `evil.example:8000`. So a page's request whose origin is the request's
own `Host` passes only when that host is one this server answers to (`HostNames`): an IP
address (a page can only be served from one by that address itself), `localhost` (and
`*.localhost`), this machine's name (and `<name>.local`), `--host`, `--public-url`'s host and
the names `--allowed-host` gives (`*`: any). Requests without an `Origin` are not checked:
the names servers and containers reach speechd by (`http://speechd:8000`) go on working.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import socket
from collections.abc import Iterable
from typing import Any

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from speechd.errors import AuthenticationFailed, OriginNotAllowed
from speechd.service import MAX_TOKEN_CHARS

__all__ = [
    "ApiKeys",
    "HostNames",
    "Origins",
    "bearer_token",
    "check_origin",
    "require_api_key",
    "sharing_scope",
]


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


def sharing_scope(connection: ASGIConnection[Any, Any, Any, Any]) -> str:
    """Who a cast this request makes is shared with (`--share-casts`): "" for every caller;
    under `per-key`, a digest of the request's API key (checked already by
    `require_api_key`), so only that key's callers share its casts. An open server (no keys)
    has one scope."""
    settings = connection.app.state.settings
    keys: ApiKeys = connection.app.state.api_keys
    if settings.share_casts != "per-key" or not keys:
        return ""
    _, _, token = (connection.headers.get("authorization") or "").strip().partition(" ")
    return "key:" + hashlib.sha256(token.strip().encode()).hexdigest()[:32]


def require_api_key(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Guard: the request must carry one of `app.state.api_keys` (when any are set)."""
    keys: ApiKeys = connection.app.state.api_keys
    keys.check(connection.headers.get("authorization"))


_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
_MAX_ORIGIN_CHARS = 300  # scheme, host and port: a longer Origin is not one we allow


def _host_port(netloc: str, scheme: str) -> tuple[str, int] | None:
    """(host, port) of `host[:port]` (`[v6]:port` too), the scheme's default port when none
    is given; None if it is not one."""
    netloc = netloc.lower()
    if netloc.startswith("["):
        host, bracket, rest = netloc.partition("]")
        host, port = host + bracket, rest.removeprefix(":")
        if rest and not rest.startswith(":"):
            return None
    else:
        host, _, port = netloc.partition(":")
    if port and not port.isdigit():
        return None
    number = int(port) if port else _DEFAULT_PORTS.get(scheme)
    return (host, number) if host and number is not None else None


def _name_of(host: str) -> str:
    """The name part of a `Host` value (`name[:port]`, `[v6]:port`), lowercase, without a
    trailing dot."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.partition(":")[0].rstrip(".")


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def machine_names() -> tuple[str, ...]:
    """This machine's own names: its host name (and its first label, alone and with
    `.local`, as mDNS answers it), lowercase."""
    full = socket.gethostname().strip().lower().rstrip(".")
    first = full.split(".", 1)[0]
    return tuple(n for n in dict.fromkeys((full, first, f"{first}.local")) if n and n != ".local")


class HostNames:
    """The names a browser page may reach this server by (see the module docstring)."""

    def __init__(self, names: Iterable[str] = (), *, machine: Iterable[str] = ()) -> None:
        given = {_name_of(n) for n in names if n and n.strip()}
        self.any = "*" in given
        self._names = (given - {"*", ""}) | {_name_of(n) for n in machine}

    def answers(self, host: str) -> bool:
        """Whether `host` (a `Host` value, with its port or not) is one of these names."""
        name = _name_of(host)
        if self.any or _is_address(name):
            return True
        return name == "localhost" or name.endswith(".localhost") or name in self._names


class Origins:
    """The web origins one app takes browsers' requests from (kept on `app.state.origins`):
    its own (a `Host` that `hosts` answers), `public_url`'s, and `allowed` (`*`: any)."""

    def __init__(
        self,
        allowed: Iterable[str] = (),
        public_url: str | None = None,
        *,
        hosts: HostNames | None = None,
    ) -> None:
        self.allowed = tuple(allowed)
        self._any = "*" in self.allowed
        self._named = {a for a in self.allowed if a != "*"}
        self.hosts = hosts or HostNames()
        if public_url:
            scheme, sep, rest = public_url.strip().partition("://")
            if sep:
                self._named.add(f"{scheme.lower()}://{rest.split('/', 1)[0].lower()}")

    def refusal(self, origin: str, host: str | None) -> str | None:
        """Why a browser page at `origin` may not send this request, which reached us as
        `host` (its `Host` header), in the caller's terms; None when it may."""
        if self._any:
            return None
        origin = origin.strip().lower()
        if len(origin) > _MAX_ORIGIN_CHARS or origin == "null":
            return _OTHER_SITE
        if origin in self._named:
            return None
        scheme, sep, netloc = origin.partition("://")
        if not sep or not host:
            return _OTHER_SITE
        theirs = _host_port(netloc, scheme)
        if theirs is None or theirs != _host_port(host.strip(), scheme):
            return _OTHER_SITE
        if not self.hosts.answers(host):
            name = _name_of(host)[:_MAX_NAME_CHARS]
            return (
                f"This server does not answer web pages by the name {name!r}; its operator "
                f"can allow it with --allowed-host {name} (or --public-url)."
            )
        return None

    def allows(self, origin: str, host: str | None) -> bool:
        """Whether a browser page at `origin` may send this request (`refusal` is None)."""
        return self.refusal(origin, host) is None


_OTHER_SITE = (
    "This server does not take requests from web pages of other sites; "
    "its operator can allow one with --allowed-origin."
)
_MAX_NAME_CHARS = 100  # of a refused name, said back


def check_origin(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Guard (every route): a browser's POST or WebSocket must come from an allowed origin."""
    origin = connection.headers.get("origin")
    if origin is None:
        return
    if connection.scope["type"] == "http" and connection.scope.get("method") in _SAFE_METHODS:
        return
    origins: Origins = connection.app.state.origins
    refusal = origins.refusal(origin, connection.headers.get("host"))
    if refusal is not None:
        raise OriginNotAllowed(refusal)


def bearer_token(authorization: str | None) -> str | None:
    """The token of `Authorization: Bearer <token>`, or None (absent, another scheme, or
    longer than `MAX_TOKEN_CHARS`: never hashed)."""
    if not authorization or len(authorization) > MAX_TOKEN_CHARS + 16:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > MAX_TOKEN_CHARS:
        return None
    return token
