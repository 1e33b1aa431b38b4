"""What a cast stream says about its latest attempt, in a few record reads.

After a `start` come only that attempt's audio records (index 0, 1, ...), so an audio record at
seq s with index i has its `start` at s - i - 1.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import msgspec

from speechd.casts import Event, Meta, Start, audio_chunk, cast_stream, decode, event_of
from speechd.durable import Record, Store

__all__ = ["CastState", "read_cast"]


@dataclass(frozen=True, slots=True)
class CastState:
    """A cast stream as a worker about to (re)start it sees it."""

    tail: int  # the stream's next seq (0: there is no such cast)
    meta: Meta | None
    terminal: bool  # ends in eos or error
    latest: Start | None = None  # the latest attempt's start
    progress: int = 0  # audio records the latest attempt appended
    touched_ms: int = 0  # when the last record was appended (by its writer's clock)


async def _record(store: Store, stream: str, seq: int) -> Record:
    return (await store.read(stream, seq, max_records=1)).records[0]


async def read_cast(store: Store, cast_id: str) -> CastState:
    stream = cast_stream(cast_id)
    tail = await store.check_tail(stream)
    if tail == 0:
        return CastState(0, None, False)
    first, last = await asyncio.gather(_record(store, stream, 0), _record(store, stream, tail - 1))
    try:
        meta = decode(first.body, Meta)
    except msgspec.DecodeError:
        meta = None
    event = event_of(last)
    touched = last.timestamp
    if event in (Event.EOS, Event.ERROR):
        return CastState(tail, meta, True, touched_ms=touched)
    if event == Event.AUDIO:
        progress = audio_chunk(last).index + 1
        start = await _record(store, stream, last.seq_num - progress)
        return CastState(tail, meta, False, decode(start.body, Start), progress, touched)
    if event == Event.START:
        return CastState(tail, meta, False, decode(last.body, Start), 0, touched)
    # Only meta (or an event this version does not know).
    return CastState(tail, meta, False, touched_ms=touched)
