"""What a cast stream says about its latest attempt, in a few record reads.

After a `start` come only that attempt's audio records (index 0, 1, ...), so an audio record at
seq s with index i has its `start` at s - i - 1.
"""

from __future__ import annotations

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


async def _record(store: Store, stream: str, seq: int) -> Record:
    return (await store.read(stream, seq, max_records=1)).records[0]


async def read_cast(store: Store, cast_id: str) -> CastState:
    stream = cast_stream(cast_id)
    tail = await store.check_tail(stream)
    if tail == 0:
        return CastState(0, None, False)
    try:
        meta = decode((await _record(store, stream, 0)).body, Meta)
    except msgspec.DecodeError:
        meta = None
    last = await _record(store, stream, tail - 1)
    event = event_of(last)
    if event in (Event.EOS, Event.ERROR):
        return CastState(tail, meta, True)
    if event == Event.AUDIO:
        progress = audio_chunk(last).index + 1
        start = await _record(store, stream, last.seq_num - progress)
        return CastState(tail, meta, False, decode(start.body, Start), progress)
    if event == Event.START:
        return CastState(tail, meta, False, decode(last.body, Start), 0)
    return CastState(tail, meta, False)  # only meta (or an event this version does not know)
