"""A streaming response as a plain ASGI app, for bodies that may have to end abruptly.

Litestar's `Stream` can only finish a body cleanly, or raise (and the server logs a
traceback). Speech and the public read path need more ends: an audio stream whose cast failed
after bytes went out (an audio file has no in-band error, so the body must end *incomplete*
rather than look finished), an SSE subscriber dropped for being too slow (its client has
stopped reading, so the pending send may never return), and every stream when the gateway
closes (so shutdown never waits on a cast that is still generating). Here each send races
those signals and the client's disconnect; `AbortBody` raised by the body, or a stop without
a farewell, ends the response without its final chunk, and the server closes the connection
(uvicorn notes that in one line: "ASGI callable returned without completing response").
`AppResponse` hands such an app to Litestar as a handler's response; `aborting` wraps an audio
body so that a failure under it (the cast's, the store's) ends it that way, with one log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from litestar import Response
from litestar.types import ASGIApp, Receive, Scope, Send

from speechd.errors import SpeechdError, StoreUnavailable

__all__ = ["AbortBody", "AppResponse", "StreamApp", "aborting"]

log = logging.getLogger("speechd.api")


class AbortBody(Exception):
    """Raised by a body generator: end the response incomplete (the connection is closed)."""


class StreamApp:
    """An ASGI app that sends `status`, `headers` and then the chunks of `body`.

    `stops` maps events to farewells: when one is set (a subscriber dropped, the gateway
    closing) while the body is still going, the pending send is abandoned, the farewell (if any)
    is offered as the last chunk for `grace_s` seconds, and the response ends there.
    """

    def __init__(
        self,
        body: AsyncGenerator[bytes, None],
        *,
        status: int = 200,
        headers: list[tuple[bytes, bytes]],
        stops: Mapping[asyncio.Event, bytes | None] | None = None,
        grace_s: float = 1.0,
    ) -> None:
        self._body = body
        self._status = status
        self._headers = headers
        self._stops = dict(stops or {})
        self._grace_s = grace_s
        self._complete = False  # the final chunk went out

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        start = {"type": "http.response.start", "status": self._status, "headers": self._headers}
        await send(start)  # type: ignore[arg-type]
        pump = asyncio.create_task(self._pump(send))
        listen = asyncio.create_task(self._listen(receive))
        stops = {
            asyncio.create_task(event.wait()): farewell for event, farewell in self._stops.items()
        }
        tasks = {pump, listen, *stops}
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._body.aclose()
        if pump in done:
            with contextlib.suppress(AbortBody):
                pump.result()
            return
        if listen in done or self._complete:
            return  # the client went away, or the body ended as it was being stopped
        farewell = next((stops[task] for task in done if task in stops), None)
        if farewell is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                last = {"type": "http.response.body", "body": farewell, "more_body": False}
                await asyncio.wait_for(send(last), self._grace_s)  # type: ignore[arg-type]

    async def _pump(self, send: Send) -> None:
        async for chunk in self._body:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        self._complete = True

    @staticmethod
    async def _listen(receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return


class AppResponse(Response[bytes]):
    """A handler's reply that is already an ASGI app (a `StreamApp`)."""

    def __init__(self, app: ASGIApp) -> None:
        super().__init__(b"")
        self._app = app

    def to_asgi_response(self, *args: Any, **kwargs: Any) -> ASGIApp:  # type: ignore[override]
        return self._app


async def aborting(body: AsyncGenerator[bytes, None]) -> AsyncGenerator[bytes, None]:
    """`body`, ended incomplete (`AbortBody`) if its cast fails under it, or the store does
    (`SpeechdError`: one warning; the store's `StoreUnavailable` was logged by the service that
    raised it). An audio file has no in-band error: its client must see an incomplete body,
    never a short file that looks whole."""
    async with contextlib.aclosing(body):
        try:
            async for piece in body:
                yield piece
        except SpeechdError as exc:
            if not isinstance(exc, StoreUnavailable):
                log.warning("a cast failed mid-stream, aborting the response: %s", exc)
            raise AbortBody(str(exc)) from exc
