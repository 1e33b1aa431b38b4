"""Reading a cast: its status at a glance, and its playable attempt as events or audio bytes.

The latest `start` opens the playable attempt. A reader that opens a cast first learns the
latest attempt from the stream's last record (every record after `meta` carries its attempt),
then replays from seq 0 skipping records of earlier attempts, then follows live. If a newer
`start` lands while it follows (the worker crashed and resumed), the reader switches to it.

`cast_audio` splices across such a switch: having sent chunks 0..k of the old attempt, it
continues with chunk k+1 of the new one. That is exact because the worker seeds each chunk's
synthesis from (cast id, chunk index) and the encoders are deterministic, so attempt n+1
re-creates the same bytes for the chunks it repeats.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec

from speechd._compat import StrEnum
from speechd.durable import Record, Store
from speechd.errors import CastFailed, CastNotFound

from ._records import (
    H_ATTEMPT,
    AudioChunk,
    Eos,
    Event,
    Failure,
    Meta,
    Start,
    audio_chunk,
    decode,
    event_of,
)
from ._streams import cast_stream

__all__ = [
    "CastEvent",
    "CastState",
    "CastStatus",
    "cast_audio",
    "cast_status",
    "follow_cast",
    "playable_chunks",
]

CastEvent = Meta | Start | AudioChunk | Eos | Failure


class CastState(StrEnum):
    QUEUED = "queued"
    GENERATING = "generating"
    DONE = "done"
    FAILED = "failed"


class CastStatus(msgspec.Struct, frozen=True):
    id: str
    state: CastState
    meta: Meta
    attempt: int
    chunks_done: int
    chunks_planned: int | None
    audio_ms: int
    lead_ms: int | None
    error: str | None = None
    queue_position: int | None = None
    """Queued casts only, when known: how many waiting casts are ahead (0: it starts next)."""
    starts_in_ms: int | None = None
    """Queued casts only, when measured capacity allows: the estimated wait until it starts."""


def _attempt(record: Record) -> int:
    value = record.header(H_ATTEMPT)
    return int(value) if value is not None else 0


async def _last_record(store: Store, stream: str, cast_id: str) -> tuple[Record, int]:
    tail = await store.check_tail(stream)
    if tail == 0:
        raise CastNotFound(f"No cast with id {cast_id!r}.", param="id")
    batch = await store.read(stream, tail - 1, max_records=1)
    return batch.records[0], tail


async def cast_status(store: Store, cast_id: str, *, now_ms: int) -> CastStatus:
    """Where a cast stands, from at most three record reads (never its whole audio)."""
    stream = cast_stream(cast_id)
    last, _ = await _last_record(store, stream, cast_id)
    meta = decode((await store.read(stream, 0, max_records=1)).records[0].body, Meta)
    event = event_of(last)
    attempt = _attempt(last)
    if event == Event.START:
        start = decode(last.body, Start)
        return CastStatus(cast_id, CastState.GENERATING, meta, attempt, 0, start.chunks, 0, None)
    if event == Event.AUDIO:
        chunk = audio_chunk(last)
        # Only audio follows a start, so the attempt's first audio sits right after it.
        first_seq = last.seq_num - chunk.index
        first = (await store.read(stream, first_seq, max_records=1)).records[0]
        audio_ms = chunk.offset_ms + chunk.duration_ms
        lead = audio_ms - (now_ms - first.timestamp)
        return CastStatus(
            cast_id,
            CastState.GENERATING,
            meta,
            attempt,
            chunk.index + 1,
            chunk.planned,
            audio_ms,
            lead,
        )
    if event == Event.EOS:
        eos = decode(last.body, Eos)
        return CastStatus(
            cast_id, CastState.DONE, meta, attempt, eos.chunks, eos.chunks, eos.audio_ms, None
        )
    if event == Event.ERROR:
        failure = decode(last.body, Failure)
        return CastStatus(
            cast_id, CastState.FAILED, meta, attempt, 0, None, 0, None, error=failure.message
        )
    return CastStatus(cast_id, CastState.QUEUED, meta, 0, 0, None, 0, None)


async def _records_upto(store: Store, stream: str, tail: int) -> AsyncIterator[Record]:
    seq = 0
    while seq < tail:
        batch = await store.read(stream, seq, max_records=min(tail - seq, 1000))
        if not batch.records:
            return
        for record in batch.records:
            if record.seq_num >= tail:
                return
            yield record
        seq = batch.records[-1].seq_num + 1


async def follow_cast(store: Store, cast_id: str, *, live: bool = True) -> AsyncIterator[CastEvent]:
    """The cast's meta, then its playable attempt's events, live, until `eos` or `error`.
    With `live=False`, only the records there are now: it also ends at the stream's tail as
    it was when called (a snapshot of a cast still generating)."""
    stream = cast_stream(cast_id)
    last, tail = await _last_record(store, stream, cast_id)
    latest = _attempt(last)
    records = store.follow(stream, 0) if live else _records_upto(store, stream, tail)
    async for record in records:
        event = event_of(record)
        attempt = _attempt(record)
        if event == Event.META:
            yield decode(record.body, Meta)
            continue
        if attempt < latest:
            continue
        if event == Event.START:
            latest = attempt
            yield decode(record.body, Start)
        elif event == Event.AUDIO:
            yield audio_chunk(record)
        elif event == Event.EOS:
            yield decode(record.body, Eos)
            return
        elif event == Event.ERROR:
            yield decode(record.body, Failure)
            return


async def playable_chunks(
    store: Store, cast_id: str, *, live: bool = True
) -> AsyncIterator[AudioChunk]:
    """The playable sequence's audio records in order, live (or, with `live=False`, those
    there are now): their bodies joined are one valid file of the cast's format.

    Raises `CastFailed` if the cast ends in `error` (after whatever audio came before it).
    """
    sent = 0
    async for event in follow_cast(store, cast_id, live=live):
        if isinstance(event, AudioChunk):
            if event.index == sent:
                sent += 1
                yield event
        elif isinstance(event, Failure):
            raise CastFailed(f"The cast could not be synthesized: {event.message}")


async def cast_audio(store: Store, cast_id: str) -> AsyncIterator[bytes]:
    """The playable sequence's audio bytes in order, live; one valid file of the cast's
    format. Raises `CastFailed` if the cast ends in `error` (after whatever audio came before
    it)."""
    async for chunk in playable_chunks(store, cast_id):
        yield chunk.body
