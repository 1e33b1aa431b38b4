"""What a door's reads of a cast race, so that its caller never waits in vain.

    watch = Watch(service, {closing.wait(): Unavailable("The server is shutting down.")})
    try:
        chunk = await watch.wait(anext(chunks))   # or the workers' 503, or Unavailable
    finally:
        watch.close()

Every wait races the workers' health (`CastService.watch_workers`: `ModelUnavailable` as soon
as the model is known not to load, `Unavailable` once no worker has been ready for the grace)
and the door's own stops (the client gone, the server shutting down): an awaitable each, and
the error that ends the wait when it finishes first.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Mapping
from typing import TypeVar

from ._casts import CastService

__all__ = ["Watch"]

T = TypeVar("T")


class Watch:
    """The workers' health and `stops`, watched for as long as one caller reads a cast;
    `close` when it is done."""

    def __init__(
        self, service: CastService, stops: Mapping[Awaitable[object], BaseException] | None = None
    ) -> None:
        self._health = asyncio.ensure_future(service.watch_workers())
        self._stops = {asyncio.ensure_future(stop): exc for stop, exc in (stops or {}).items()}

    async def wait(self, work: Awaitable[T]) -> T:
        """`work`'s result; raises what ended the wait first: the workers' error, a stop's
        error, or the error of `work` itself (which is cancelled if it has not finished)."""
        task = asyncio.ensure_future(work)
        try:
            await asyncio.wait(
                {task, self._health, *self._stops}, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if not task.cancelled():
            return task.result()
        for stop, exc in self._stops.items():
            if stop.done():
                raise exc
        self._health.result()  # raises: the workers' watch never returns
        raise AssertionError("the workers' watch ended without an error")

    def close(self) -> None:
        for task in (self._health, *self._stops):
            if not task.cancel() and not task.cancelled():
                task.exception()  # retrieved, so asyncio does not log it as forgotten
