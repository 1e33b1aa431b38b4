"""The api process: `create_app(settings)` builds the Litestar app.

The app opens the store (unless one is given), reads the deployment secret and builds the
`CastService` and the `Gateway` over it in its lifespan, and runs the retention sweep (a cast's
streams together: `speechd.casts.CastRetention`) and the worker supervisor (under `speechd
serve`) for as long as it lives. Routes get the service, the
gateway, the metrics and the settings injected; nothing lives in module globals, so tests
build as many apps as they like. The api never imports torch: it validates, claims and reads
streams, and workers do the rest.

    GET /healthz     200 as soon as the api answers
    GET /readyz      200 once a worker is ready: its model loaded, or given back while idle
                     (`--idle-unload`; `model` says which, and each worker's device, its state
                     and any fallback to the CPU); 503 before
    GET /metrics     Prometheus text (see `speechd.api.metrics` for what is measured where)
    /v1/...          the OpenAI-compatible routes (`speechd.api.openai_compat`)
    /v1/casts, /, /c/<id>, /static/...
                     the cast API, the public read path and the pages (`speechd.api.gateway`)

A shutting-down server calls `close_streams(app)` before it waits on in-flight responses:
followers of a cast still generating (SSE, long-polls, live audio, live-cast WebSockets)
would otherwise hold it up until the cast ends.

Every long-lived read (SSE, long-polls, live audio, speech requests that wait, live-cast
WebSockets) holds one of the server's `StreamSlots` (`--max-streams` in all,
`--max-client-streams` per client, the client named by `--client-header` and
`--trusted-proxies`); `release_slots` around the app gives them back when each request ends.
`create_app(slots=...)` takes a `StreamSlots` that another door (the Wyoming server, under
`speechd serve`) counts its syntheses in too.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from litestar import Litestar, Response, get
from litestar.config.cors import CORSConfig
from litestar.datastructures import State
from litestar.di import NamedDependency, Provide
from litestar.types import Message, Scope

from speechd import casts
from speechd.casts import schema
from speechd.config import Settings
from speechd.durable import Store
from speechd.limits import StreamSlots
from speechd.service import CastService, LiveCasts, open_services

from ._auth import ApiKeys, Origins, check_origin
from ._clients import ClientAddress
from ._errors import exception_handlers
from ._slots import ClientSlots, release_slots
from .gateway import Gateway, GatewaySettings, gateway_router
from .metrics import CONTENT_TYPE, ApiMetrics, SupervisedWorker
from .openai_compat import openai_router

__all__ = ["WorkerSupervisor", "close_streams", "create_app", "gateway_settings"]

class WorkerSupervisor(SupervisedWorker, Protocol):
    """The worker process supervisor `speechd serve` hands to its app (speechd.worker's)."""

    def start(self) -> None: ...

    def stop(self, timeout: float) -> object: ...


@get("/healthz", sync_to_thread=False)
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@get("/readyz")
async def readyz(service: NamedDependency[CastService]) -> dict[str, Any]:
    workers = await service.require_workers()
    health = await service.health()  # the one require_workers read (cached)
    return {
        "status": "ready",
        "model": health.model or "resident",
        "workers": [w.worker for w in workers],
        "devices": {w.worker: _device(w) for w in workers},
    }


def _device(worker: schema.WorkerNotice) -> dict[str, str | int]:
    """A ready worker's device as /readyz shows it: where its model is, why it speaks on the
    CPU when it left the device it was asked for, the most chunks it renders in one pass
    (`--max-batch`, or what auto measured there) and the decoder it speaks with (`--graph`,
    or what auto chose there)."""
    shown: dict[str, str | int] = {"device": worker.device, "name": worker.device_name}
    shown["state"] = worker.state or "resident"
    if worker.fallback:
        shown["fallback"] = worker.fallback
    if worker.max_batch > 0:
        shown["max_batch"] = worker.max_batch
    if worker.graph:
        shown["graph"] = worker.graph
    return shown


@get("/metrics", media_type=CONTENT_TYPE)
async def metrics_text(
    service: NamedDependency[CastService], metrics: NamedDependency[ApiMetrics]
) -> Response[bytes]:
    await metrics.refresh(service)
    return Response(metrics.render(), media_type=CONTENT_TYPE)


def _state_value(name: str) -> Callable[[State], Any]:
    def provide(state: State) -> Any:
        return state[name]

    return provide


def gateway_settings(settings: Settings) -> GatewaySettings:
    """The public read path's settings: its rate limit, client key and stream caps from
    `settings`, the rest its own."""
    return GatewaySettings(
        read_rate=settings.read_rate,
        read_burst=settings.read_burst,
        client_header=settings.client_header,
        trusted_proxies=settings.trusted_proxies,
        max_streams=settings.max_streams,
        max_client_streams=settings.max_client_streams,
    )


async def close_streams(app: Litestar) -> None:
    """End the gateway's open-ended responses (SSE, long-polls, live audio) now; a no-op
    before the app has started. Call it when shutdown begins, before waiting on in-flight
    responses."""
    live: LiveCasts | None = app.state.get("live_casts")
    if live is not None:
        live.close()
    gateway: Gateway | None = app.state.get("gateway")
    if gateway is not None:
        await gateway.close()


async def _cancel(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def create_app(
    settings: Settings,
    *,
    store: Store | None = None,
    supervisor: WorkerSupervisor | None = None,
    gateway: GatewaySettings | None = None,
    slots: StreamSlots | None = None,
    clock: Callable[[], float] = time.time,
) -> Litestar:
    """The api app. `store`: use this open store (the caller closes it) instead of opening
    `settings.store_url`; `supervisor`: start it with the app and stop it (after in-flight
    responses) when the app shuts down; `gateway`: the public read path's settings, instead
    of `gateway_settings(settings)`; `slots`: count long-lived reads in this `StreamSlots`
    (shared with another door) instead of one of the app's own, sized by `gateway`'s caps."""
    read_path = gateway or gateway_settings(settings)
    streams = slots or StreamSlots(read_path.max_streams, read_path.max_client_streams)
    client_slots = ClientSlots(
        streams,
        ClientAddress(read_path.client_header, trusted_proxies=read_path.trusted_proxies),
    )
    metrics = ApiMetrics(supervisor=supervisor, slots=streams)

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            service, live = await stack.enter_async_context(
                open_services(settings, store=store, clock=clock)
            )
            app.state.service = service
            app.state.live_casts = live
            app.state.gateway = Gateway(service, read_path, slots=client_slots)
            stack.push_async_callback(app.state.gateway.close)
            if settings.retention is not None:
                sweeping = asyncio.create_task(
                    casts.sweep_casts_forever(service.store, settings.retention)
                )
                stack.push_async_callback(_cancel, sweeping)
            if supervisor is not None:
                await asyncio.to_thread(supervisor.start)
                stack.push_async_callback(
                    asyncio.to_thread, supervisor.stop, settings.shutdown_timeout
                )
            yield

    async def count_response(message: Message, scope: Scope) -> None:
        if message["type"] == "http.response.start":
            route = scope.get("path_template") or "unmatched"
            metrics.request(route, scope.get("method", ""), message["status"])

    cors = None
    if settings.allowed_origins:  # CORS only for the origins asked for
        cors = CORSConfig(
            allow_origins=list(settings.allowed_origins),
            allow_methods=["GET", "POST", "OPTIONS"],
            allow_headers=["authorization", "content-type", "last-event-id", "range"],
            expose_headers=[
                "x-cast-id",
                "x-cast-url",
                "x-cast-status",
                "x-cast-start-delay",
                "retry-after",
                "content-range",
                "etag",
            ],
        )
    return Litestar(
        route_handlers=[healthz, readyz, metrics_text, openai_router, gateway_router()],
        guards=[check_origin],
        cors_config=cors,
        dependencies={
            "service": Provide(_state_value("service"), sync_to_thread=False),
            "gateway": Provide(_state_value("gateway"), sync_to_thread=False),
            "live_casts": Provide(_state_value("live_casts"), sync_to_thread=False),
            "metrics": Provide(_state_value("metrics"), sync_to_thread=False),
            "settings": Provide(_state_value("settings"), sync_to_thread=False),
            "slots": Provide(_state_value("slots"), sync_to_thread=False),
        },
        exception_handlers=exception_handlers,
        lifespan=[lifespan],
        before_send=[count_response],
        middleware=[release_slots],
        request_max_body_size=settings.max_body_bytes,
        state=State(
            {
                "settings": settings,
                "metrics": metrics,
                "slots": client_slots,
                "api_keys": ApiKeys(settings.api_keys),
                "origins": Origins(settings.allowed_origins, settings.public_url),
            }
        ),
        logging_config=None,
        openapi_config=None,
    )
