"""The api process: `create_app(settings)` builds the Litestar app.

The app opens the cast service in its lifespan (`speechd.service.open_services`: over the
store `settings` name, unless one is given) and the `Gateway` over it, and runs the service's
retention sweep (`CastService.sweep_forever`: a cast's streams together) and the worker
supervisor (under `speechd serve`) for as long as it lives. Routes get the service, the
gateway, the metrics and the settings injected; nothing lives in module globals, so tests
build as many apps as they like. The api never imports torch nor reads the store: it decodes
requests, calls the service, and shapes its answers; workers do the rest.

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
from urllib.parse import urlsplit

from litestar import Litestar, Response, get
from litestar.config.cors import CORSConfig
from litestar.datastructures import State
from litestar.di import NamedDependency, Provide
from litestar.types import Message, Scope

from speechd.casts.schema import WorkerNotice
from speechd.config import Settings
from speechd.limits import StreamSlots
from speechd.service import CastService, LiveCasts, OpenStore, open_services

from ._auth import ApiKeys, HostNames, Origins, check_origin, machine_names
from ._clients import ClientAddress
from ._errors import exception_handlers
from ._slots import ClientSlots, release_slots
from .books import books_router
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


def _device(worker: WorkerNotice) -> dict[str, str | int]:
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
    return settings.sub_config(GatewaySettings)


def _host_names(settings: Settings) -> HostNames:
    """The names browser pages may reach the api by: `--host`, `--public-url`'s host,
    `--allowed-host`'s and this machine's own (besides addresses and `localhost`)."""
    public = urlsplit(settings.public_url).hostname if settings.public_url else None
    return HostNames(
        (settings.host, public or "", *settings.allowed_hosts), machine=machine_names()
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
    store: OpenStore | None = None,
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
            service, live, books = await stack.enter_async_context(
                open_services(settings, store=store, clock=clock)
            )
            app.state.service = service
            app.state.live_casts = live
            app.state.books = books
            app.state.gateway = Gateway(service, read_path, slots=client_slots)
            stack.push_async_callback(app.state.gateway.close)
            if settings.retention is not None:
                sweeping = asyncio.create_task(service.sweep_forever(settings.retention))
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
        route_handlers=[
            healthz,
            readyz,
            metrics_text,
            openai_router,
            books_router,
            gateway_router(),
        ],
        guards=[check_origin],
        cors_config=cors,
        dependencies={
            "service": Provide(_state_value("service"), sync_to_thread=False),
            "gateway": Provide(_state_value("gateway"), sync_to_thread=False),
            "live_casts": Provide(_state_value("live_casts"), sync_to_thread=False),
            "books": Provide(_state_value("books"), sync_to_thread=False),
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
                "origins": Origins(
                    settings.allowed_origins, settings.public_url, hosts=_host_names(settings)
                ),
            }
        ),
        logging_config=None,
        openapi_config=None,
    )
