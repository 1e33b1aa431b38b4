"""The gateway's knobs, one frozen struct. `create_app` fills the client key, rate limit and
stream caps from `speechd.config.Settings` (`--client-header`, `--trusted-proxies`,
`--read-rate`, `--read-burst`, `--max-streams`, `--max-client-streams`); the rest are the
gateway's own defaults, named in `speechd.limits`."""

from __future__ import annotations

from typing import Annotated

import msgspec

from speechd.limits import MAX_READ_RECORDS, MAX_WAIT_S, SSE_BUFFER_BYTES

__all__ = ["GatewaySettings"]

_Positive = Annotated[float, msgspec.Meta(gt=0)]
_PositiveInt = Annotated[int, msgspec.Meta(ge=1)]


class GatewaySettings(msgspec.Struct, frozen=True, kw_only=True):
    """How the public read path (and the api's long-lived reads) behave.

    read_rate, read_burst: each client (by address) may make `read_burst` public reads at once
        and `read_rate` per second after that; more get 429 with `Retry-After`.
    client_header, trusted_proxies: a header trusted reverse proxies append the client's
        address to (`x-forwarded-for`); the entry `trusted_proxies` from its right end names
        the client. None trusts only the socket's peer address (the api's `ClientAddress`).
    max_streams, max_client_streams: long-lived reads (SSE, long-polls, live audio, speech
        requests that wait) the api holds in all, and per client; past them 503 and 429.
    max_wait_s: the longest long-poll a records read may ask for.
    max_records, max_read_bytes: the most one records read returns.
    sse_buffer_bytes: bytes of frames a live SSE subscriber may fall behind before it is
        disconnected.
    sse_keepalive_s: idle time after which an SSE stream sends a comment line.
    """

    read_rate: _Positive = 20.0
    read_burst: _PositiveInt = 60
    client_header: str | None = None
    trusted_proxies: _PositiveInt = 1
    max_streams: _PositiveInt = 512
    max_client_streams: _PositiveInt = 64
    max_wait_s: _Positive = MAX_WAIT_S
    max_records: Annotated[int, msgspec.Meta(ge=1, le=MAX_READ_RECORDS)] = 100
    max_read_bytes: _PositiveInt = 2 * 1024 * 1024
    sse_buffer_bytes: _PositiveInt = SSE_BUFFER_BYTES
    sse_keepalive_s: _Positive = 15.0
