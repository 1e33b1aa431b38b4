"""OpenAI's speech API on top of casts, and every error in OpenAI's JSON shape.

`openai_router` holds the `/v1` routes; `exception_handlers` is the app-wide error map (only
this package turns `speechd.errors` into HTTP); `require_api_key` guards routes that make
casts; `cast_headers` names a cast in any response, `public_base_url` is where links point;
`create_live` and `live_created` make a live cast for the gateway's `POST /v1/casts`.
"""

from __future__ import annotations

from ._auth import ApiKeys, require_api_key
from ._errors import error_body, error_body_for, exception_handlers
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
    "SpeechRequest",
    "VoiceRef",
    "cast_headers",
    "cast_url",
    "create_live",
    "error_body",
    "error_body_for",
    "exception_handlers",
    "live_created",
    "openai_router",
    "public_base_url",
    "require_api_key",
    "resolve_model",
]
