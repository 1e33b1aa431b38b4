"""The cast API, the public read path, and the paste page and player
(`docs/design/index.md#serving-a-cast`).

Routes (`gateway_router()`; the app provides the dependency `gateway`, a `Gateway` built in
its lifespan over the shared `speechd.service.CastService` and `GatewaySettings`, besides
its `settings` and `metrics`):

    POST /v1/casts                      submit {input, voice?, speed?, response_format?, title?}
    GET  /v1/casts/{id}                 status, progress, voice, title, created
    GET  /v1/casts/{id}/records         JSON records from ?seq_num, long-poll ?wait seconds
    GET  /v1/casts/{id}/events          SSE from ?seq_num or Last-Event-ID
    GET  /v1/casts/{id}/audio           the playable attempt as one file (ranges once done)
    GET  /v1/casts/{id}/captions.vtt    its words as WebVTT (.srt: SubRip), so far if live
    GET  /v1/casts/{id}/words           its words as JSON, seconds from the audio's start
    GET  /                              the paste page
    GET  /c/{id}                        the player
    GET  /static/{name}                 the pages' scripts and styles (shipped, allowlisted)

Casts are submitted by `CastService.submit`, as `/v1/audio/speech` submits them (up to
`MAX_CAST_CHARS`; the route has its own body limit, `MAX_CAST_BODY_BYTES`); writes take
`speechd.api`'s `require_api_key`, reads are public (a cast's link is its capability) and rate
limited per client; the long-lived ones (SSE, long-polls that wait, live audio) each hold one
of the client's stream slots (`speechd.limits.StreamSlots`, shared with speech requests).
Casts are read through the service's reader (`CastService.reader`), which reads only
`pub/casts/<id>` streams, and only after checking the id. Every bound
(`speechd.limits`) is checked before the work it guards. Errors are raised from
`speechd.errors`; the app's handlers shape them. The wire shapes are `_wire`'s (the
client mirrors them), the per-client read limiter `_limiter`'s.
"""

from __future__ import annotations

from ._gateway import Gateway
from ._routes import gateway_router
from ._settings import GatewaySettings

__all__ = ["Gateway", "GatewaySettings", "gateway_router"]
