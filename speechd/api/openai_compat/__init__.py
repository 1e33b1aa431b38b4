"""OpenAI's speech API on top of casts, and live casts over HTTP and a WebSocket.

`openai_router` holds the `/v1` routes (speech, models, voices, a live cast's input and its
WebSocket); `create_live` and `live_created` make a live cast for the gateway's
`POST /v1/casts`; `resolve_model` refuses a model speechd does not run (`_models.MODEL_NAMES`
are those it answers to); `MAX_WS_MESSAGE_BYTES` is the WebSocket's message limit (the server's
`ws_max_size`). The plumbing these routes share with the gateway (bodies, errors, keys,
links, slots, streamed bodies) is `speechd.api`'s own.
"""

from __future__ import annotations

from ._live import create_live, live_created
from ._live_wire import MAX_WS_MESSAGE_BYTES
from ._models import resolve_model
from ._routes import openai_router

__all__ = [
    "MAX_WS_MESSAGE_BYTES",
    "create_live",
    "live_created",
    "openai_router",
    "resolve_model",
]
