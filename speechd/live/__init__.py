"""Live casts: text that arrives over time (issue 16, DESIGN.md §6).

`LiveCasts` makes a live cast (a random id, an input token), appends the pieces of its input
to the private stream `input/<id>` (`speechd.casts._input` holds the layout and the rules) and
follows its audio. The routes that speak HTTP and WebSocket for it are `speechd.openai_compat`'s
(`POST /v1/casts/{id}/input`, `/v1/audio/speech/live`) and the gateway's `POST /v1/casts`
(`"live": true`); the worker follows the input and plans what has arrived.
"""

from __future__ import annotations

from ._service import (
    DEFAULT_IDLE_S,
    MAX_LIVE_CHARS,
    MAX_PIECE_CHARS,
    MAX_PIECES,
    MAX_TOKEN_CHARS,
    LiveCast,
    LiveCasts,
    LiveRequest,
    bearer_token,
    check_piece,
)

__all__ = [
    "DEFAULT_IDLE_S",
    "MAX_LIVE_CHARS",
    "MAX_PIECES",
    "MAX_PIECE_CHARS",
    "MAX_TOKEN_CHARS",
    "LiveCast",
    "LiveCasts",
    "LiveRequest",
    "bearer_token",
    "check_piece",
]
