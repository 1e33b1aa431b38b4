"""OpenAI's speech API on top of casts, and every error in OpenAI's JSON shape.

`openai_router` holds the `/v1` routes; `exception_handlers` is the app-wide error map (only
this package turns `speechd.errors` into HTTP); `require_api_key` guards routes that make
casts; `cast_headers` names a cast in any response, `public_base_url` is where links point;
`create_live` and `live_created` make a live cast for the gateway's `POST /v1/casts`.
`BodyDecoder` reads a route's JSON body straight into its shape (bounded, one pass);
`log_store_trouble` is the one log line a store failure gets.
"""

from __future__ import annotations

from .._auth import ApiKeys, require_api_key
from .._bodies import BodyDecoder
from .._errors import (
    error_body,
    error_body_for,
    exception_handlers,
    log_store_trouble,
)
from ._live import create_live, live_created
from ._live_wire import MAX_WS_MESSAGE_BYTES
from ._models import MODEL_NAMES, resolve_model
from ._routes import cast_headers, cast_url, openai_router, public_base_url
from ._schemas import MAX_INPUT_CHARS, SpeechRequest, VoiceRef
from ._speech import OUTPUT_TOKENS_PER_SECOND

__all__ = [
    "MAX_INPUT_CHARS",
    "MAX_WS_MESSAGE_BYTES",
    "MODEL_NAMES",
    "OUTPUT_TOKENS_PER_SECOND",
    "ApiKeys",
    "BodyDecoder",
    "SpeechRequest",
    "VoiceRef",
    "cast_headers",
    "cast_url",
    "create_live",
    "error_body",
    "error_body_for",
    "exception_handlers",
    "live_created",
    "log_store_trouble",
    "openai_router",
    "public_base_url",
    "require_api_key",
    "resolve_model",
]
