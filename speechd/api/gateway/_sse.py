"""Server-sent events for a cast: catch up on its records, then share one live reader per cast.

A subscriber first replays the records it asked for (`CastReader.records`, the cast service's
reader), at its own pace (no buffer). At the tail it joins the cast's *hub*: one task per live
cast that long-polls the reader and hands each new record, framed once, to every subscriber's
bounded queue without ever
waiting on one. A subscriber whose queue is full (its client stopped reading) is dropped: its
response is told so in-band (`event: abort`) if the connection still takes bytes, and closed
either way, so one stalled listener never holds back the others or grows the server's memory.

Frames: `id: <seq>`, `event: <meta|start|audio|eos|error>`, `data: <record as JSON>` (see
`RecordView`). The stream ends after `eos` or `error`. Keep-alive comments flow while idle.
A failed read (the store's: the service logs its one line) ends the stream with `event: abort`
(reason `unavailable`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator
from typing import NamedTuple

import msgspec

from speechd.errors import SpeechdError
from speechd.service import CastReader, CastRecord

from ._wire import record_view

__all__ = ["Hubs", "Subscriber", "cast_frames"]

_CATCH_UP_RECORDS = 64
_CATCH_UP_BYTES = 1024 * 1024
_HUB_WAIT_S = 30.0

KEEPALIVE = b": keep-alive\n\n"


def _event_name(record: CastRecord) -> bytes:
    name = record.event.encode("utf-8", "replace") or b"message"
    return name if name.isalpha() else b"message"


class Frame(NamedTuple):
    seq: int
    data: bytes
    terminal: bool


def frame(record: CastRecord) -> Frame:
    data = msgspec.json.encode(record_view(record))
    text = b"id: %d\nevent: %s\ndata: %s\n\n" % (record.seq_num, _event_name(record), data)
    return Frame(record.seq_num, text, record.terminal)


def abort_frame(reason: str, message: str) -> bytes:
    data = msgspec.json.encode({"reason": reason, "message": message})
    return b"event: abort\ndata: %s\n\n" % data


_UNAVAILABLE = "The cast's stream could not be read; try again shortly."


class Subscriber:
    """One live listener's queue of frames, at most `limit_bytes` of them (a frame that finds
    the queue empty is always taken)."""

    def __init__(self, limit_bytes: int) -> None:
        self._limit = limit_bytes
        self._bytes = 0
        self._queue: deque[Frame] = deque()
        self._ready = asyncio.Event()
        self.dropped = asyncio.Event()
        self.failure: tuple[str, str] | None = None  # (reason, message)
        self.start = 0  # the hub's position when this subscriber joined

    def offer(self, item: Frame) -> bool:
        """Queue `item`; False (and dropped) if it would not fit."""
        size = len(item.data)
        if self._queue and self._bytes + size > self._limit:
            self._queue.clear()
            self._bytes = 0
            self.dropped.set()
            return False
        self._queue.append(item)
        self._bytes += size
        self._ready.set()
        return True

    def fail(self, reason: str, message: str) -> None:
        self.failure = (reason, message)
        self._ready.set()

    async def next(self, idle_s: float) -> Frame | None:
        """The next frame, or None after `idle_s` seconds idle (or on failure)."""
        if not self._queue and self.failure is None:
            self._ready.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._ready.wait(), idle_s)
        if not self._queue:
            return None
        item = self._queue.popleft()
        self._bytes -= len(item.data)
        return item


class _Hub:
    def __init__(self, hubs: Hubs, cast_id: str, position: int) -> None:
        self.cast_id = cast_id
        self.position = position
        self.subscribers: set[Subscriber] = set()
        self._hubs = hubs
        self.task = asyncio.create_task(self._run(), name=f"speechd-sse-hub-{cast_id}")

    async def _run(self) -> None:
        reader = self._hubs.reader
        try:
            while True:
                page = await reader.records(self.cast_id, self.position, wait=_HUB_WAIT_S)
                for record in page.records:
                    item = frame(record)
                    self.position = record.seq_num + 1
                    for subscriber in list(self.subscribers):
                        if not subscriber.offer(item):
                            self.subscribers.discard(subscriber)
                            self._hubs.dropped += 1
                    if item.terminal:
                        return
        except SpeechdError:  # the store failed (logged where it was read), or the cast went
            for subscriber in self.subscribers:
                subscriber.fail("unavailable", _UNAVAILABLE)
        finally:
            self._hubs.forget(self)


class Hubs:
    """The live hubs of one gateway, keyed by cast id; each lives while it has subscribers."""

    def __init__(self, reader: CastReader) -> None:
        self.reader = reader
        self.dropped = 0  # subscribers disconnected for being too slow, ever
        self._hubs: dict[str, _Hub] = {}
        self._closed = False

    def __len__(self) -> int:
        return len(self._hubs)

    def join(self, cast_id: str, position: int, subscriber: Subscriber) -> None:
        if self._closed:
            subscriber.fail("shutting_down", "The server is shutting down.")
            return
        hub = self._hubs.get(cast_id)
        if hub is None:
            hub = self._hubs[cast_id] = _Hub(self, cast_id, position)
        subscriber.start = hub.position
        hub.subscribers.add(subscriber)

    def leave(self, cast_id: str, subscriber: Subscriber) -> None:
        hub = self._hubs.get(cast_id)
        if hub is None:
            return
        hub.subscribers.discard(subscriber)
        if not hub.subscribers:
            hub.task.cancel()
            self.forget(hub)

    def forget(self, hub: _Hub) -> None:
        if self._hubs.get(hub.cast_id) is hub:
            del self._hubs[hub.cast_id]

    async def close(self) -> None:
        self._closed = True
        hubs = list(self._hubs.values())
        self._hubs.clear()
        for hub in hubs:
            for subscriber in hub.subscribers:
                subscriber.fail("shutting_down", "The server is shutting down.")
            hub.task.cancel()
        await asyncio.gather(*(hub.task for hub in hubs), return_exceptions=True)


async def cast_frames(
    hubs: Hubs,
    cast_id: str,
    seq_num: int,
    subscriber: Subscriber,
    *,
    keepalive_s: float,
) -> AsyncGenerator[bytes, None]:
    """The SSE body for one subscriber: records from `seq_num` until `eos` or `error`."""
    next_seq = seq_num

    async def replay(until: int | None) -> AsyncIterator[Frame]:
        nonlocal next_seq
        while until is None or next_seq < until:
            batch = await hubs.reader.records(
                cast_id, next_seq, max_records=_CATCH_UP_RECORDS, max_bytes=_CATCH_UP_BYTES
            )
            for record in batch.records:
                next_seq = record.seq_num + 1
                yield frame(record)
            if next_seq >= batch.tail:
                return

    yield b"retry: 3000\n\n"
    try:
        async for item in replay(None):
            yield item.data
            if item.terminal:
                return
        hubs.join(cast_id, next_seq, subscriber)
        try:
            async for item in replay(subscriber.start):
                yield item.data
                if item.terminal:
                    return
            while True:
                live = await subscriber.next(keepalive_s)
                if subscriber.failure is not None:
                    yield abort_frame(*subscriber.failure)
                    return
                if live is None:
                    yield KEEPALIVE
                elif live.seq >= next_seq:
                    next_seq = live.seq + 1
                    yield live.data
                    if live.terminal:
                        return
        finally:
            hubs.leave(cast_id, subscriber)
    except SpeechdError:  # the store failed (logged where it was read), or the cast went
        yield abort_frame("unavailable", _UNAVAILABLE)
