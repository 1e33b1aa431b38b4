"""The OpenAI-compatible routes. Each decodes, calls the injected `CastService`, returns.

    POST /v1/audio/speech      make (or join) a cast and answer with its audio
    GET  /v1/models            OpenAI's model list; GET /v1/models/{id} one model
    GET  /v1/audio/models      {"models": [{"id"}]}          (Open WebUI reads these two)
    GET  /v1/audio/voices      {"voices": [{"id", "name"}]}
    POST /v1/casts/{id}/input  a piece of a live cast's input (`_live`)
    WS   /v1/audio/speech/live a live cast over one WebSocket (`_live_ws`)

Dependencies (provided by `create_app`): `service` (CastService), `metrics` (ApiMetrics),
`settings` (Settings), `live_casts` (LiveCasts), `slots` (ClientSlots: a speech request, and
a live cast's WebSocket, holds one of the client's long-lived-read slots from before it is
submitted until its response ends).
"""

from __future__ import annotations

import time
from typing import Any

from litestar import Request, Response, Router, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath

from speechd.config import Settings
from speechd.service import CastService, voice_label

from .._auth import require_api_key, sharing_scope
from .._bodies import BodyDecoder
from .._links import cast_headers, public_base_url
from .._slots import ClientSlots
from ..metrics import ApiMetrics
from ._live import append_input
from ._live_ws import speech_live
from ._models import MODEL_NAMES, resolve_model
from ._schemas import (
    MAX_INPUT_CHARS,
    AudioModel,
    AudioModelList,
    Model,
    ModelList,
    SpeechRequest,
    VoiceEntry,
    VoiceList,
)
from ._speech import Mode, speech_response

__all__ = ["openai_router"]

_MODEL_CREATED = 1737936000  # Kokoro-82M v1.0, 2025-01-27
_SPEECH_BODY = BodyDecoder(SpeechRequest)


@post("/audio/speech", guards=[require_api_key], status_code=200)
async def create_speech(
    request: Request[Any, Any, Any],
    service: NamedDependency[CastService],
    metrics: NamedDependency[ApiMetrics],
    settings: NamedDependency[Settings],
    slots: NamedDependency[ClientSlots],
) -> Response[Any]:
    """Text to speech, OpenAI's way; the response streams the cast's audio as it is made."""
    started = time.monotonic()
    data = await _SPEECH_BODY.read(request)
    resolve_model(data.model)
    slots.take(request.scope)  # past the caps: 429/503 before anything is submitted
    mode: Mode = (
        "sse" if data.stream_format == "sse" else "whole" if data.stream is False else "audio"
    )
    start = data.start or settings.start
    at_once = start == "now" and mode != "whole"  # a whole file waits for its end
    cast = await service.submit(
        data.to_cast_request(at_once=at_once, scope=sharing_scope(request)),
        max_chars=MAX_INPUT_CHARS,
    )
    metrics.submitted(cast.created)
    return await speech_response(
        service,
        metrics,
        cast,
        mode=mode,
        started=started,
        headers=cast_headers(
            public_base_url(settings, request), cast.id, unsupported=cast.unsupported
        ),
        receive=request.receive,
        words=bool(data.word_timestamps),
        start=start,
    )


def _model(name: str) -> Model:
    return Model(id=name, created=_MODEL_CREATED)


@get("/models")
async def list_models() -> ModelList:
    return ModelList(data=[_model(name) for name in MODEL_NAMES])


@get("/models/{model_id:str}")
async def retrieve_model(model_id: FromPath[str]) -> Model:
    resolve_model(model_id)
    return _model(model_id)


@get("/audio/models")
async def list_audio_models() -> AudioModelList:
    return AudioModelList(models=[AudioModel(id=name) for name in MODEL_NAMES])


@get("/audio/voices")
async def list_voices(service: NamedDependency[CastService]) -> VoiceList:
    voices = await service.voices()
    return VoiceList(voices=[VoiceEntry(id=v, name=voice_label(v)) for v in voices])


openai_router = Router(
    path="/v1",
    route_handlers=[
        create_speech,
        list_models,
        retrieve_model,
        list_audio_models,
        list_voices,
        append_input,
        speech_live,
    ],
)
"""Every OpenAI-compatible route, under `/v1`."""
