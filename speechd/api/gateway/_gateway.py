"""The gateway: what the routes call. It reads casts through the cast service's reader
(`CastService.reader`, which reads only `pub/casts/<id>` streams, and only after checking the
id), and adds what HTTP needs of a read: a client's stream slot, the server's shutdown, the
request's headers, the wire shapes.

Bounded before work: headers past their `speechd.limits` length are refused (`Last-Event-ID`)
or read as absent (`Range`, `If-None-Match`, `If-Range`) before they are parsed. Long-lived
reads (SSE, long-polls that wait, live audio) hold a stream slot of their client's
(`StreamSlots`: 429 or 503 past the caps). A store failure (the service's `StoreUnavailable`,
one log line) is a 503 `store_unavailable` before the response starts, and after it an
`abort` event (SSE) or an incomplete body (audio). A finished cast's file, whole or by ranges,
is served as a whole file from its layout (`CastReader.finished_file`, `file_bytes`: a wav says
its true sizes).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any, TypeVar

from litestar import Request

from speechd.audio import FORMATS, content_type
from speechd.casts import CastCaptions, CastState, CastStatus
from speechd.casts.schema import Meta
from speechd.errors import CastFailed, InvalidRequest, RateLimited
from speechd.limits import (
    MAX_EVENT_ID_CHARS,
    StreamSlots,
)
from speechd.service import CastService, SubmittedCast

from .._clients import ClientAddress
from .._ranges import AudioReply, encode_headers, file_reply
from .._slots import ClientSlots
from .._streaming import StreamApp, aborting
from ..openai_compat import resolve_model
from ._captions import Rendered
from ._limiter import ReadLimiter
from ._settings import GatewaySettings
from ._sse import Hubs, Subscriber, abort_frame, cast_frames
from ._wire import MAX_CAST_CHARS, CastView, NewCast, RecordsPage, cast_view
from ._wire import record_view as _record_view

__all__ = ["Gateway"]

T = TypeVar("T")


class Gateway:
    """Cast API and public read path over the cast service. Build once per app (in its
    lifespan); `close()` as the server starts shutting down, and again at the end."""

    def __init__(
        self,
        service: CastService,
        settings: GatewaySettings | None = None,
        *,
        slots: ClientSlots | None = None,
    ) -> None:
        self.service = service
        self.reader = service.reader
        self.settings = settings or GatewaySettings()
        self.streams = slots or ClientSlots(
            StreamSlots(self.settings.max_streams, self.settings.max_client_streams),
            ClientAddress(
                self.settings.client_header, trusted_proxies=self.settings.trusted_proxies
            ),
        )
        """The api's long-lived reads (shared with `/v1/audio/speech`), by client."""
        self.slots = self.streams.slots
        """The slot counter itself (what is held and refused)."""
        self.hubs = Hubs(self.reader)
        self.limiter = ReadLimiter(self.settings.read_rate, self.settings.read_burst)
        self.rendered = Rendered()
        """Caption files and word pages as last made, per cast (the routes render through it)."""
        self._closing = asyncio.Event()

    async def close(self) -> None:
        """End every open stream (SSE: an `abort` event; live audio: incomplete) and long-poll,
        so a server shutting down never waits on a cast that is still generating."""
        self._closing.set()
        await self.hubs.close()

    # -- who is asking ------------------------------------------------------------------

    def client_key(self, request: Request[Any, Any, Any]) -> str:
        """The key per-client limits count `request` by (`ClientAddress`)."""
        return self.streams.key(request.scope)

    def _hold_stream(self, request: Request[Any, Any, Any] | None) -> None:
        if request is not None:
            self.streams.take(request.scope)

    def admit(self, request: Request[Any, Any, Any]) -> None:
        """Charge one public read to the client; raise `RateLimited` past its quota."""
        wait = self.limiter.take(self.client_key(request))
        if wait is not None:
            raise RateLimited(
                "Too many reads from this client; slow down.",
                retry_after=ReadLimiter.retry_after(wait),
            )

    # -- the cast API -------------------------------------------------------------------

    async def create(self, request: NewCast, *, scope: str = "") -> tuple[SubmittedCast, CastState]:
        """Submit a cast through the shared service (the same checks, ids and queue limit as
        `/v1/audio/speech`), or find the identical one (of `scope`'s callers: see
        `CastRequest.scope`); returns it and where it stands."""
        resolve_model(request.model)
        cast = await self.service.submit(
            request.to_cast_request(scope=scope), max_chars=MAX_CAST_CHARS
        )
        if cast.created:
            return cast, CastState.QUEUED
        return cast, (await self.service.status(cast.id)).state

    async def view(self, cast_id: str, base_url: str) -> CastView:
        return cast_view(await self.service.status(cast_id), base_url)

    async def meta(self, cast_id: str) -> Meta | None:
        """A cast's public meta, or None if there is no such cast."""
        return await self.reader.meta(cast_id)

    # -- the public read path -----------------------------------------------------------

    async def records(
        self,
        cast_id: str,
        seq_num: int,
        wait: float,
        max_records: int | None,
        *,
        request: Request[Any, Any, Any] | None = None,
    ) -> RecordsPage:
        """A page of records from `seq_num`; at the tail, a long-poll of up to `wait` seconds
        (it holds a stream slot of `request`'s client)."""
        tail = await self.reader.tail(cast_id)
        if seq_num > tail:
            raise InvalidRequest(
                f"seq_num {seq_num} is past the end of the cast ({tail} records).",
                param="seq_num",
            )
        limit = min(max_records or self.settings.max_records, self.settings.max_records)
        wait = 0 if self._closing.is_set() else min(max(wait, 0.0), self.settings.max_wait_s)
        if wait > 0 and seq_num == tail:
            self._hold_stream(request)
        read = self.reader.records(
            cast_id,
            seq_num,
            max_records=limit,
            max_bytes=self.settings.max_read_bytes,
            wait=wait,
        )
        batch = await self._unless_closing(read)
        if batch is None:  # closing: an empty page; the client polls again (elsewhere)
            return RecordsPage([], tail)
        return RecordsPage([_record_view(r) for r in batch.records], batch.tail)

    async def _unless_closing(self, work: Coroutine[Any, Any, T]) -> T | None:
        """`work`'s result, or None if the gateway closes first (then `work` is cancelled)."""
        task = asyncio.ensure_future(work)
        closing = asyncio.ensure_future(self._closing.wait())
        try:
            await asyncio.wait({task, closing}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closing.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            return None
        return task.result()

    async def events(
        self,
        cast_id: str,
        seq_num: int | None,
        last_event_id: str | None,
        *,
        request: Request[Any, Any, Any] | None = None,
    ) -> StreamApp | None:
        """The SSE stream after `Last-Event-ID` when the request has one (an EventSource that
        reconnects sends it, with the page's original `?seq_num` still in its URL: the
        header is where it got to), else from `seq_num`; None: nothing more, ever. The stream
        holds a slot of `request`'s client."""
        if last_event_id is not None and len(last_event_id) > MAX_EVENT_ID_CHARS:
            raise InvalidRequest("Last-Event-ID is not a record number.", param="Last-Event-ID")
        tail = await self.reader.tail(cast_id)
        start = seq_num if seq_num is not None else 0
        if last_event_id:
            try:
                start = int(last_event_id) + 1
            except ValueError:
                raise InvalidRequest(
                    "Last-Event-ID is not a record number.", param="Last-Event-ID"
                ) from None
        if start < 0 or start > tail:
            raise InvalidRequest(
                f"seq_num {start} is past the end of the cast ({tail} records).",
                param="seq_num",
            )
        if start == tail:
            last = (await self.reader.records(cast_id, tail - 1, max_records=1)).records
            if last and last[0].terminal:
                return None
        self._hold_stream(request)
        subscriber = Subscriber(self.settings.sse_buffer_bytes)
        frames = cast_frames(
            self.hubs,
            cast_id,
            start,
            subscriber,
            keepalive_s=self.settings.sse_keepalive_s,
        )
        return StreamApp(
            frames,
            headers=[
                (b"content-type", b"text/event-stream; charset=utf-8"),
                (b"cache-control", b"no-cache, no-store"),
                (b"x-accel-buffering", b"no"),
            ],
            stops={
                subscriber.dropped: abort_frame(
                    "too_slow", "This listener fell too far behind the live cast."
                ),
                self._closing: abort_frame("shutting_down", "The server is shutting down."),
            },
        )

    async def captions(self, cast_id: str) -> tuple[CastStatus, CastCaptions]:
        """The cast's words with cast-level times: all of a done cast's, what exists so far of
        a generating one's (each record's words read once, without its audio: `CastWords`).
        `CastFailed` for a failed cast, as its audio."""
        status = await self.service.status(cast_id)
        if status.state == CastState.FAILED:
            raise CastFailed(f"The cast could not be synthesized: {status.error}")
        return status, await self.reader.captions(cast_id)

    async def audio(
        self,
        cast_id: str,
        *,
        range_header: str | None,
        if_none_match: str | None,
        if_range: str | None,
        request: Request[Any, Any, Any] | None = None,
    ) -> StreamApp | AudioReply:
        """The cast's audio file: live and chunked while generating (holding a stream slot of
        `request`'s client); an entity once done."""
        status = await self.service.status(cast_id)
        meta = status.meta
        kind = content_type(meta.format) if meta.format in FORMATS else "application/octet-stream"
        name = f"{cast_id}.{meta.format}"
        base = {
            "content-type": kind,
            "content-disposition": f'inline; filename="{name}"',
            "x-cast-id": cast_id,
            "x-cast-status": status.state.value,
        }
        if status.state == CastState.FAILED:
            raise CastFailed(f"The cast could not be synthesized: {status.error}")
        if status.state != CastState.DONE:
            self._hold_stream(request)
            headers = {**base, "cache-control": "no-store", "accept-ranges": "none"}
            return StreamApp(
                aborting(self.reader.audio(cast_id)),
                headers=encode_headers(headers),
                stops={self._closing: None},  # an audio file has no in-band error: incomplete
            )
        file = await self.reader.finished_file(cast_id)
        reply = file_reply(file.size, file.etag, base, range_header, if_none_match, if_range)
        if isinstance(reply, AudioReply):
            return reply
        body = self.reader.file_bytes(cast_id, file, reply.start, reply.stop)
        return StreamApp(
            aborting(body),
            status=reply.status,
            headers=encode_headers(reply.headers),
            stops={self._closing: None},
        )
