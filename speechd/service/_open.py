"""The services a door runs on, built from the settings in one place (the HTTP api's lifespan
and the Wyoming door both open them)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import NamedTuple, TypeAlias

from speechd import casts
from speechd.config import Settings
from speechd.durable import Store, open_store

from ._books import BookService
from ._casts import CastService
from ._live import LiveCasts

__all__ = ["OpenStore", "Services", "open_services"]

OpenStore: TypeAlias = Store
"""An open store, as a door may be handed one to open its services over (a test's, or one
process's serving several doors): the door passes it to `open_services` and reads nothing of
it, so it needs no more of `speechd.durable` than this name."""


class Services(NamedTuple):
    service: CastService
    live: LiveCasts
    books: BookService


@contextlib.asynccontextmanager
async def open_services(
    settings: Settings, *, store: OpenStore | None = None, clock: Callable[[], float] = time.time
) -> AsyncIterator[Services]:
    """A `CastService`, its `LiveCasts` and its `BookService` for `settings` (queue limit,
    default voice and aliases, live inputs' idle timeout), over `store` (the caller closes it)
    or else the store `settings.store_url` names, opened here and closed on exit. Live
    sessions are told to end on exit."""
    async with contextlib.AsyncExitStack() as stack:
        if store is None:
            store = await open_store(settings.store_url)
            stack.push_async_callback(store.close)
        engine = settings.engine_config()
        secret = await casts.deployment_secret(store)
        service = CastService(
            store,
            secret,
            max_queue=settings.max_queue,
            default_voice=engine.default_voice,
            voice_map=engine.voice_map,
            clock=clock,
        )
        live = LiveCasts(service, secret, idle_s=settings.live_idle_timeout, clock=clock)
        stack.callback(live.close)
        yield Services(service, live, BookService(service, store, secret, clock=clock))
