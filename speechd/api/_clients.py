"""Who a request comes from: the key that per-client limits count by.

Without a configured header the key is the connection's peer address. Behind reverse proxies
(`--client-header x-forwarded-for --trusted-proxies N`) it is the address the outermost
trusted proxy saw: each proxy *appends* the address it received the request from, so the
client's own entries (anything it sent in the header itself) are on the left, and the Nth
entry from the right end is the last one a trusted proxy wrote. Taking the left end would let
any client pick its own key, and so its own quota.

A header that is absent (a request that reached speechd around the proxy) falls back to the
peer address; one with fewer entries than trusted proxies gives its leftmost entry (every
entry was then written by a trusted proxy). `Forwarded` (RFC 7239) is read the same way, by
its `for=` parameters. Each step is one linear split; keys are cut to `MAX_CLIENT_KEY_CHARS`,
so no header can grow the per-client tables.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

from speechd.limits import MAX_CLIENT_KEY_CHARS

__all__ = ["ClientAddress"]

_UNKNOWN = "unknown"


def _host(entry: str) -> str:
    """`entry` as an address: `1.2.3.4`, `1.2.3.4:5678`, `[::1]:80` and `::1` all read as the
    address alone; anything else (`unknown`, an obfuscated `_node`) stays as it is."""
    entry = entry.strip().strip('"').strip()
    if entry.startswith("["):  # [v6]:port
        entry = entry[1 : entry.find("]")] if "]" in entry else entry[1:]
    elif entry.count(":") == 1:  # v4:port (a bare v6 address has several colons)
        entry = entry.split(":", 1)[0]
    try:
        return str(ipaddress.ip_address(entry[: MAX_CLIENT_KEY_CHARS + 1]))
    except ValueError:
        return entry[:MAX_CLIENT_KEY_CHARS]


def _forwarded_for(element: str) -> str:
    """The `for=` value of one RFC 7239 element (`for=192.0.2.1;proto=https`), else ''."""
    for pair in element.split(";"):
        name, _, value = pair.partition("=")
        if name.strip().lower() == "for":
            return value
    return ""


class ClientAddress:
    """The client key of a request, from the trusted proxies' header or the peer address."""

    def __init__(self, header: str | None = None, *, trusted_proxies: int = 1) -> None:
        if trusted_proxies < 1:
            raise ValueError("trusted_proxies must be at least 1")
        self.header = header.strip().lower() if header else None
        self.trusted_proxies = trusted_proxies
        self._raw_header = self.header.encode("latin-1") if self.header else None

    def of_scope(self, scope: Mapping[str, Any]) -> str:
        """The client's key for an ASGI request `scope` (its headers and `client`)."""
        peer = scope.get("client")
        host = peer[0] if peer else None
        if self._raw_header is None:
            return self.key((), host)
        # ASGI header names are lower-case bytes; values are latin-1.
        values = [v.decode("latin-1") for k, v in scope.get("headers", ()) if k == self._raw_header]
        return self.key(values, host)

    def key(self, header_values: Iterable[str], peer: str | None) -> str:
        """The client's key. `header_values`: every line of the configured header, in the
        order received (several lines read as one comma-separated list); `peer`: the
        connection's peer address."""
        fallback = _host(peer) if peer else _UNKNOWN
        if self.header is None:
            return fallback
        joined = ",".join(header_values)
        if not joined.strip():
            return fallback
        # The last `trusted_proxies` entries, at most: one bounded split from the right.
        n = self.trusted_proxies
        entries = joined.rsplit(",", n)
        chosen = entries[-n] if len(entries) > n else entries[0]
        if self.header == "forwarded":
            chosen = _forwarded_for(chosen)
        return _host(chosen) or fallback
