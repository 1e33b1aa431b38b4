"""Reading a cast: its status at a glance, and its playable sequence as events, audio records
(`playable_chunks`: what captions and word events read) or audio bytes.

All follow the playable-sequence rule (`_playable`): a reader opens the cast at its head
(the latest `start` lists the records it keeps), replays that sequence, then follows the
stream live. A new attempt that starts while it follows (the worker died, or another took the
cast over) keeps the records the reader already has, so the reader goes on with the new
attempt's own records; only an attempt that keeps fewer (another model, encoder or plan) cuts
the sequence, and a live reader cannot take back what it sent: `cast_audio` then raises
`CastFailed` (a response ends incomplete; read the cast again for its new audio).

An `error` ends the cast as far as a reader following it is concerned (it raises
`CastFailed` after the audio before it). A reader that opens a cast whose `error` was followed
by `retry` (someone asked for it again) replays the kept audio and waits for the new attempt.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec

from speechd._compat import StrEnum
from speechd.durable import Store
from speechd.errors import CastFailed, CastNotFound

from ._playable import CastHead, read_head
from ._records import AudioChunk, Eos, Event, Failure, Meta, Start, audio_chunk, decode, event_of
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

_REPLAY_RECORDS = 64
_REPLAY_BYTES = 4 * 1024 * 1024


class CastState(StrEnum):
    QUEUED = "queued"
    LOADING = "loading"
    """Waiting for its first audio while no worker holds the model (`--idle-unload` gave it
    back; the worker is taking it again): the api says so, from the workers' notices."""
    GENERATING = "generating"
    DONE = "done"
    FAILED = "failed"


class CastStatus(msgspec.Struct, frozen=True):
    """Where a cast stands. `chunks_done` counts the records of its playable sequence;
    `lead_ms` is its audio minus the time since its listeners' clock started (negative: a
    listener who started then would be waiting). A failed cast says why (`error`) and that the
    same request makes it again (`retryable`), keeping the audio that can continue.

    `hold_ms` is the start hold its first audio states (a cast that cannot be made in real
    time holds its listeners back that long after its first audio, so that the rest plays
    without a stall; 0: none); `plays_in_ms`, while that hold still runs, how long until the
    listeners' clock starts (None otherwise)."""

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
    """Queued casts, when measured capacity allows: the estimated wait until it starts;
    loading ones, when the model's load time is known: that wait plus the rest of the load."""
    retryable: bool = False
    hold_ms: int = 0
    plays_in_ms: int | None = None


async def _head(store: Store, cast_id: str) -> CastHead:
    head = await read_head(store, cast_id)
    if head.tail == 0 or head.meta is None:
        raise CastNotFound(f"No cast with id {cast_id!r}.", param="id")
    return head


async def cast_status(store: Store, cast_id: str, *, now_ms: int) -> CastStatus:
    """Where a cast stands, from a few record reads (never its whole audio)."""
    head = await _head(store, cast_id)
    assert head.meta is not None
    done = head.length
    final = head.final
    planned = final.planned if final is not None else None
    if planned is None and head.start is not None:
        planned = head.start.chunks
    lead = None
    if head.origin_ms is not None and head.event in (Event.START, Event.AUDIO):
        lead = head.audio_ms - (now_ms - head.origin_ms)
    if head.event == Event.EOS:
        eos = decode(head.last.body, Eos) if head.last is not None else None
        total = eos.chunks if eos is not None else done
        audio_ms = eos.audio_ms if eos is not None else head.audio_ms
        state = CastState.DONE
        return CastStatus(
            cast_id,
            state,
            head.meta,
            head.attempt,
            total,
            total,
            audio_ms,
            None,
            hold_ms=head.hold_ms,
        )
    if head.event == Event.ERROR:
        message = head.failure.message if head.failure is not None else "unknown"
        return CastStatus(
            cast_id,
            CastState.FAILED,
            head.meta,
            head.attempt,
            done,
            planned,
            head.audio_ms,
            None,
            error=message,
            retryable=True,
        )
    if head.start is None or head.event == Event.RETRY:
        return CastStatus(
            cast_id, CastState.QUEUED, head.meta, head.attempt, done, planned, head.audio_ms, None
        )
    plays_in = None
    if head.origin_ms is not None and head.origin_ms > now_ms:
        plays_in = head.origin_ms - now_ms
    return CastStatus(
        cast_id,
        CastState.GENERATING,
        head.meta,
        head.attempt,
        done,
        planned,
        head.audio_ms,
        lead,
        hold_ms=head.hold_ms,
        plays_in_ms=plays_in,
    )


async def follow_cast(store: Store, cast_id: str, *, live: bool = True) -> AsyncIterator[CastEvent]:
    """The cast's meta, its latest `start`, its playable sequence's audio records, live, then
    `eos` or the `error` (a later attempt's `start` comes too, as it lands). With
    `live=False`, only the records there are now: it also ends at the stream's tail as it was
    when called (a snapshot of a cast still generating).

    Raises `CastNotFound`, or `CastFailed` when a new attempt cuts records already yielded.
    """
    head = await _head(store, cast_id)
    stream = cast_stream(cast_id)
    assert head.meta is not None
    yield head.meta
    if head.start is not None:
        yield head.start
    sent = 0
    for span in head.spans:
        seq, end = span.seq, span.seq + span.count
        while seq < end:
            batch = await store.read(
                stream, seq, max_records=min(end - seq, _REPLAY_RECORDS), max_bytes=_REPLAY_BYTES
            )
            for record in batch.records[: end - seq]:
                yield audio_chunk(record)
                sent += 1
            seq += len(batch.records[: end - seq])
    if head.event == Event.EOS and head.last is not None:
        yield decode(head.last.body, Eos)
        return
    if head.event == Event.ERROR:
        yield head.failure or Failure("unknown", head.attempt)
        return
    if not live:  # the head's playable sequence is every record up to its tail
        return
    async for record in store.follow(stream, head.tail):
        event = event_of(record)
        if event == Event.START:
            start = decode(record.body, Start)
            if start.keep != sent:
                raise CastFailed(
                    "The cast started over from an earlier point while it was read "
                    "(another model, encoder or plan); read it again."
                )
            yield start
        elif event == Event.AUDIO:
            chunk = audio_chunk(record)
            if chunk.index == sent:
                sent += 1
                yield chunk
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

    Raises `CastFailed` if the cast ends in `error` (after whatever audio came before it), or
    when a new attempt cuts records already yielded (see `follow_cast`).
    """
    async for event in follow_cast(store, cast_id, live=live):
        if isinstance(event, AudioChunk):
            yield event
        elif isinstance(event, Failure):
            raise CastFailed(f"The cast could not be synthesized: {event.message}")


async def cast_audio(store: Store, cast_id: str) -> AsyncIterator[bytes]:
    """The playable sequence's audio bytes in order, live; one valid file of the cast's
    format. Raises `CastFailed` if the cast ends in `error` (after whatever audio came before
    it)."""
    async for chunk in playable_chunks(store, cast_id):
        yield chunk.body
