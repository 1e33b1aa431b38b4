"""The gateway service: what the routes call. It reads only `pub/casts/<id>` streams.

Every public entry point checks the id with `is_cast_id` before naming a stream, and names
streams only through `cast_stream`, so no request can reach `jobs`, `catalog/*`, cursors or
receipts, whatever its path holds.

Bounded before work: headers past their `speechd.limits` length are refused (`Last-Event-ID`)
or read as absent (`Range`, `If-None-Match`, `If-Range`) before they are parsed. Long-lived
reads (SSE, long-polls that wait, live audio) hold a stream slot of their client's
(`StreamSlots`: 429 or 503 past the caps). A store failure is a 503 `store_unavailable`
before the response starts, and after it an `abort` event (SSE) or an incomplete body (audio),
with one log line. A finished cast's file, whole or by ranges, is served as a whole file from
its layout (`CastService.finished_file`, `file_bytes`: a wav says its true sizes).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

from litestar import Request

from speechd.audio import FORMATS, content_type
from speechd.casts import CastCaptions, CastState, CastStatus, CastWords, cast_audio, is_cast_id
from speechd.casts.schema import H_EVENT, Meta, cast_stream, decode
from speechd.durable import DurableError, SeqOutOfRange
from speechd.errors import CastFailed, CastNotFound, InvalidRequest, RateLimited, StoreUnavailable
from speechd.limits import (
    MAX_EVENT_ID_CHARS,
    MAX_IF_HEADER_CHARS,
    MAX_RANGE_CHARS,
    StreamSlots,
)
from speechd.service import CastRequest, CastService, SubmittedCast

from .._clients import ClientAddress
from .._errors import log_store_trouble
from .._slots import ClientSlots
from .._streaming import StreamApp, aborting
from ..openai_compat import resolve_model
from ._audio import AudioReply, encode_headers, file_reply
from ._captions import Rendered
from ._limiter import ReadLimiter
from ._settings import GatewaySettings
from ._sse import Hubs, Subscriber, abort_frame, cast_frames
from ._wire import MAX_CAST_CHARS, CastView, NewCast, RecordsPage, cast_view
from ._wire import record_view as _record_view

__all__ = ["Gateway"]

T = TypeVar("T")


@contextlib.contextmanager
def _store_errors() -> Iterator[None]:
    try:
        yield
    except SeqOutOfRange as exc:
        raise InvalidRequest(
            f"seq_num {exc.seq_num} is past the end of the cast ({exc.tail} records).",
            param="seq_num",
        ) from exc
    except DurableError as exc:
        log_store_trouble("reading a cast", exc)
        raise StoreUnavailable() from exc


def _bounded(header: str | None, limit: int) -> str | None:
    """`header`, or None (absent) when it is longer than any valid value of it."""
    return header if header is None or len(header) <= limit else None


def _check_id(cast_id: str) -> str:
    if not is_cast_id(cast_id):
        raise CastNotFound("No cast with this id.", param="id")
    return cast_id


class Gateway:
    """Cast API and public read path over the cast service's store. Build once per app (in
    its lifespan); `close()` as the server starts shutting down, and again at the end."""

    def __init__(
        self,
        service: CastService,
        settings: GatewaySettings | None = None,
        *,
        slots: ClientSlots | None = None,
    ) -> None:
        self.service = service
        self.store = service.store
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
        self.hubs = Hubs(self.store)
        self.limiter = ReadLimiter(self.settings.read_rate, self.settings.read_burst)
        self._words = CastWords(self.store)
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

    async def create(
        self, request: NewCast, *, scope: str = ""
    ) -> tuple[SubmittedCast, CastState]:
        """Submit a cast through the shared service (the same checks, ids and queue limit as
        `/v1/audio/speech`), or find the identical one (of `scope`'s callers: see
        `CastRequest.scope`); returns it and where it stands."""
        resolve_model(request.model)
        cast = await self.service.submit(
            CastRequest(
                text=request.input,
                voice=request.voice,
                speed=request.speed,
                format=request.response_format,
                title=(request.title or "").strip() or None,
                input_format=request.input_format,
                normalize=request.normalize,
                scope=scope,
            ),
            max_chars=MAX_CAST_CHARS,
        )
        if cast.created:
            return cast, CastState.QUEUED
        return cast, (await self._status(cast.id)).state

    async def _status(self, cast_id: str) -> CastStatus:
        with _store_errors():
            return await self.service.status(cast_id)

    async def view(self, cast_id: str, base_url: str) -> CastView:
        return cast_view(await self._status(_check_id(cast_id)), base_url)

    async def meta(self, cast_id: str) -> Meta | None:
        """A cast's public meta, or None if there is no such cast."""
        if not is_cast_id(cast_id):
            return None
        with _store_errors():
            batch = await self.store.read(cast_stream(cast_id), 0, max_records=1)
        if not batch.records:
            return None
        return decode(batch.records[0].body, Meta)

    # -- the public read path -----------------------------------------------------------

    async def _tail(self, cast_id: str) -> int:
        _check_id(cast_id)
        with _store_errors():
            tail = await self.store.check_tail(cast_stream(cast_id))
        if tail == 0:
            raise CastNotFound(f"No cast with id {cast_id!r}.", param="id")
        return tail

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
        tail = await self._tail(cast_id)
        if seq_num > tail:
            raise InvalidRequest(
                f"seq_num {seq_num} is past the end of the cast ({tail} records).",
                param="seq_num",
            )
        limit = min(max_records or self.settings.max_records, self.settings.max_records)
        wait = 0 if self._closing.is_set() else min(max(wait, 0.0), self.settings.max_wait_s)
        if wait > 0 and seq_num == tail:
            self._hold_stream(request)
        read = self.store.read(
            cast_stream(cast_id),
            seq_num,
            max_records=limit,
            max_bytes=self.settings.max_read_bytes,
            wait=wait,
        )
        with _store_errors():
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
        tail = await self._tail(cast_id)
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
            with _store_errors():
                last = (await self.store.read(cast_stream(cast_id), tail - 1)).records[0]
            if last.header(H_EVENT) in (b"eos", b"error"):
                return None
        self._hold_stream(request)
        subscriber = Subscriber(self.settings.sse_buffer_bytes)
        frames = cast_frames(
            self.store,
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
        status = await self._status(_check_id(cast_id))
        if status.state == CastState.FAILED:
            raise CastFailed(f"The cast could not be synthesized: {status.error}")
        with _store_errors():
            return status, await self._words.captions(cast_id)

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
        range_header = _bounded(range_header, MAX_RANGE_CHARS)
        if_none_match = _bounded(if_none_match, MAX_IF_HEADER_CHARS)
        if if_range is not None and len(if_range) > MAX_IF_HEADER_CHARS:
            if_range = ""  # matches no etag: the whole file, as for any stale validator
        status = await self._status(_check_id(cast_id))
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
                aborting(cast_audio(self.store, cast_id), "streaming live audio"),
                headers=encode_headers(headers),
                stops={self._closing: None},  # an audio file has no in-band error: incomplete
            )
        with _store_errors():
            file = await self.service.finished_file(cast_id)
        reply = file_reply(file, base, range_header, if_none_match, if_range)
        if isinstance(reply, AudioReply):
            return reply
        body = self.service.file_bytes(cast_id, file, reply.start, reply.stop)
        return StreamApp(
            aborting(body, "serving a cast's audio file"),
            status=reply.status,
            headers=encode_headers(reply.headers),
            stops={self._closing: None},
        )
