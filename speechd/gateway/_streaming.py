"""A streaming response as a plain ASGI app, for bodies that may have to end abruptly.

Litestar's `Stream` can only finish a body cleanly. The public read path needs two more ends:
an SSE subscriber dropped for being too slow (its client has stopped reading, so the pending
send may never return) and a live audio file whose cast failed after bytes went out (an audio
file has no in-band error, so the body must end *incomplete* rather than look finished). Here
each send races the drop signal and the client's disconnect; `AbortBody` raised by the body or
a drop ends the response without its final chunk, and the server closes the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator

from litestar.types import Receive, Scope, Send

__all__ = ["AbortBody", "StreamApp"]


class AbortBody(Exception):
    """Raised by a body generator: end the response incomplete (the connection is closed)."""


class StreamApp:
    """An ASGI app that sends `status`, `headers` and then the chunks of `body`.

    If `dropped` is set while a send is pending, the send is abandoned; `farewell` (if any) is
    offered as the last chunk for `grace_s` seconds, and the response ends there.
    """

    def __init__(
        self,
        body: AsyncGenerator[bytes, None],
        *,
        status: int = 200,
        headers: list[tuple[bytes, bytes]],
        dropped: asyncio.Event | None = None,
        farewell: bytes | None = None,
        grace_s: float = 1.0,
    ) -> None:
        self._body = body
        self._status = status
        self._headers = headers
        self._dropped = dropped if dropped is not None else asyncio.Event()
        self._farewell = farewell
        self._grace_s = grace_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        start = {"type": "http.response.start", "status": self._status, "headers": self._headers}
        await send(start)  # type: ignore[arg-type]
        pump = asyncio.create_task(self._pump(send))
        listen = asyncio.create_task(self._listen(receive))
        drop = asyncio.create_task(self._dropped.wait())
        try:
            done, _ = await asyncio.wait({pump, listen, drop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (pump, listen, drop):
                task.cancel()
            await asyncio.gather(pump, listen, drop, return_exceptions=True)
            await self._body.aclose()
        if pump in done:
            with contextlib.suppress(AbortBody):
                pump.result()
            return
        if drop in done and listen not in done and self._farewell is not None:
            with contextlib.suppress(TimeoutError):
                last = {"type": "http.response.body", "body": self._farewell, "more_body": False}
                await asyncio.wait_for(send(last), self._grace_s)  # type: ignore[arg-type]

    async def _pump(self, send: Send) -> None:
        async for chunk in self._body:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    @staticmethod
    async def _listen(receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
