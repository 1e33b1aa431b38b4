"""The cast API, the public read path, and the paste page and player (DESIGN.md §4).

Routes (`gateway_router()`; the app provides the dependency `gateway`, a `Gateway` built in
its lifespan over the store, `GatewaySettings` and the shared submit service):

    POST /v1/casts                      submit {input, voice?, speed?, response_format?, title?}
    GET  /v1/casts/{id}                 status, progress, voice, title, created
    GET  /v1/casts/{id}/records         JSON records from ?seq_num, long-poll ?wait seconds
    GET  /v1/casts/{id}/events          SSE from ?seq_num or Last-Event-ID
    GET  /v1/casts/{id}/audio           the playable attempt as one file (ranges once done)
    GET  /                              the paste page
    GET  /c/{id}                        the player
    GET  /static/{name}                 the pages' scripts and styles (shipped, allowlisted)

Only `pub/casts/<id>` streams are ever read, and only after `is_cast_id(id)`. Errors are
raised from `speechd.errors`; the app's handlers shape them.
"""

from __future__ import annotations

from ._gateway import CastService, Gateway
from ._limiter import ReadLimiter
from ._routes import gateway_router
from ._settings import GatewaySettings
from ._wire import CastCreated, CastView, NewCast, RecordsPage, RecordView, derive_title

__all__ = [
    "CastCreated",
    "CastService",
    "CastView",
    "Gateway",
    "GatewaySettings",
    "NewCast",
    "ReadLimiter",
    "RecordView",
    "RecordsPage",
    "derive_title",
    "gateway_router",
]
