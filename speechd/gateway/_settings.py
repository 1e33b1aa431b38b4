"""The gateway's knobs, one frozen struct. `create_app` fills the rate limit from
`speechd.config.Settings` (`--read-rate`, `--read-burst`, `--client-header`); the rest are
the gateway's own defaults."""

from __future__ import annotations

from typing import Annotated

import msgspec

__all__ = ["GatewaySettings"]

_Positive = Annotated[float, msgspec.Meta(gt=0)]


class GatewaySettings(msgspec.Struct, frozen=True, kw_only=True):
    """How the public read path behaves.

    read_rate, read_burst: each client (by address) may make `read_burst` public reads at once
        and `read_rate` per second after that; more get 429 with `Retry-After`.
    client_header: a header set by a trusted reverse proxy (`x-forwarded-for`) whose first
        address names the client; None trusts only the socket's peer address.
    max_wait_s: the longest long-poll a records read may ask for.
    max_records, max_read_bytes: the most one records read returns.
    sse_buffer: records a live SSE subscriber may fall behind before it is disconnected.
    sse_keepalive_s: idle time after which an SSE stream sends a comment line.
    """

    read_rate: _Positive = 20.0
    read_burst: Annotated[int, msgspec.Meta(ge=1)] = 60
    client_header: str | None = None
    max_wait_s: _Positive = 30.0
    max_records: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 100
    max_read_bytes: Annotated[int, msgspec.Meta(ge=1)] = 2 * 1024 * 1024
    sse_buffer: Annotated[int, msgspec.Meta(ge=1)] = 64
    sse_keepalive_s: _Positive = 15.0
