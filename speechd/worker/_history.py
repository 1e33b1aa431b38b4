"""What a cast stream says about earlier attempts, read backwards in a few record reads.

After a `start` come only that attempt's audio records (index 0, 1, ...), so an audio record at
seq s with index i has its `start` at s - i - 1, and the record just before a `start` is the last
record of the attempt before it. Walking back attempt by attempt costs two reads per attempt.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from speechd.casts import Event, Meta, Start, audio_chunk, cast_stream, decode, event_of
from speechd.durable import Record, Store

__all__ = ["Attempt", "CastState", "failures", "read_cast"]


@dataclass(frozen=True, slots=True)
class Attempt:
    start: Start
    start_seq: int
    progress: int  # audio records it appended


@dataclass(frozen=True, slots=True)
class CastState:
    """A cast stream as a worker about to (re)start it sees it."""

    tail: int  # the stream's next seq (0: there is no such cast)
    meta: Meta | None
    terminal: bool  # ends in eos or error
    attempts: list[Attempt]  # oldest first


async def _record(store: Store, stream: str, seq: int) -> Record:
    return (await store.read(stream, seq, max_records=1)).records[0]


async def read_cast(store: Store, cast_id: str) -> CastState:
    stream = cast_stream(cast_id)
    tail = await store.check_tail(stream)
    if tail == 0:
        return CastState(0, None, False, [])
    try:
        meta = decode((await _record(store, stream, 0)).body, Meta)
    except msgspec.DecodeError:
        meta = None
    last = await _record(store, stream, tail - 1)
    if event_of(last) in (Event.EOS, Event.ERROR):
        return CastState(tail, meta, True, [])
    attempts: list[Attempt] = []
    end, record = tail, last
    while record.seq_num > 0:
        event = event_of(record)
        if event == Event.AUDIO:
            start_seq = record.seq_num - audio_chunk(record).index - 1
            record = await _record(store, stream, start_seq)
        elif event != Event.START:
            break  # an event this version does not know: stop reading history here
        start = decode(record.body, Start)
        attempts.append(Attempt(start, record.seq_num, end - record.seq_num - 1))
        end = record.seq_num
        record = await _record(store, stream, record.seq_num - 1)
    attempts.reverse()
    return CastState(tail, meta, False, attempts)


def failures(progress: list[int]) -> int:
    """How many attempts ended at the cast's furthest chunk (failing there, or dying there).

    `progress` lists the audio records of each attempt, oldest first. A chunk that fails (or
    crashes the worker) stops every attempt at the same place, so these attempts count against
    the retries; an attempt that got further starts the count again, and one stopped earlier
    (a restart while catching up) does not count.
    """
    if not progress:
        return 0
    best = max(progress)
    first = progress.index(best)
    return sum(1 for p in progress[first:] if p == best)
