"""The playable sequence of a cast, worked out in one place, and the cast's head.

The rule (see `_records` for the stream's layout): attempt n's playable sequence is the first
`keep` audio records of attempt n-1's, then attempt n's own audio records; the cast's playable
sequence is its latest attempt's. Attempt n's `start` lists its kept records as seq spans
(`Start.kept`, made by `kept_spans` when the start is written), so the whole sequence follows
from the latest `start` and the number of records its attempt appended: `playable_spans`.

Every reader goes through here: the speech response and `/audio` (`cast_audio`, the layout of
a done cast), `cast_status`, the worker deciding how to resume a cast (`read_head`,
`resume_point`), and the web player (static/player.js mirrors `playable_spans`).

`read_head` reads a cast's head in a few record reads: the last record, the latest `start`
(the last record names its seq in `x`), and the first and last records of the playable
sequence. Audio records are read without their bodies (`Store.read(..., bodies=False)`): a
head is a few small reads whatever the cast's format or length. Streams written before `x`
(and `keep`) existed are read by their old rule: an audio record's `i` counted from its
attempt's `start`, so the start sits `i + 1` seqs before it; their attempts keep nothing.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TypeVar

import msgspec

from speechd.durable import Record, SeqOutOfRange, Store

from ._records import (
    H_INDEX,
    H_RESUME,
    H_START,
    AudioChunk,
    Event,
    Failure,
    Meta,
    RecordSpan,
    Start,
    audio_chunk,
    decode,
    event_of,
)
from ._streams import cast_stream

__all__ = ["CastHead", "kept_spans", "playable_spans", "read_head", "resume_point"]

T = TypeVar("T", bound=msgspec.Struct)

_BACK = 32  # the most records looked back for a chunk's end (a chunk is at most ~12 records)


def playable_spans(start: Start, start_seq: int, own: int) -> list[RecordSpan]:
    """The playable sequence of the attempt that `start` (at `start_seq`) opened and that has
    appended `own` audio records of its own: its kept spans, then those records."""
    spans = [span for span in start.kept if span.count > 0]
    if own > 0:
        spans.append(RecordSpan(start_seq + 1, start.keep, own))
    return spans


def kept_spans(spans: list[RecordSpan], keep: int) -> list[RecordSpan]:
    """The first `keep` records of the playable sequence `spans`: what the next attempt's
    `start` lists as `kept` when it keeps `keep` records."""
    kept: list[RecordSpan] = []
    for span in spans:
        if keep <= span.index:
            break
        kept.append(RecordSpan(span.seq, span.index, min(span.count, keep - span.index)))
    return kept


def seq_of(spans: list[RecordSpan], index: int) -> int:
    """The seq of record `index` of the playable sequence `spans` (IndexError if beyond)."""
    for span in spans:
        if span.index <= index < span.index + span.count:
            return span.seq + index - span.index
    raise IndexError(f"record {index} is not in the playable sequence")


def length_of(spans: list[RecordSpan]) -> int:
    return spans[-1].index + spans[-1].count if spans else 0


@dataclass(frozen=True, slots=True)
class CastHead:
    """A cast stream's head: where it stands and what its playable sequence is."""

    tail: int  # the stream's next seq (0: there is no such cast)
    meta: Meta | None = None
    event: str | None = None  # the last record's event
    last: Record | None = None  # the stream's last record (an audio record without its body)
    start: Start | None = None  # the latest attempt's start
    start_seq: int = -1
    own: int = 0  # audio records the latest attempt appended itself
    spans: list[RecordSpan] = field(default_factory=list)  # the playable sequence
    final: AudioChunk | None = None  # the playable sequence's last record (its headers)
    origin_ms: int | None = None  # when the listeners' clock started; None: no audio yet
    failure: Failure | None = None  # why it failed, if it ends in error
    hold_ms: int = 0  # how long after its first audio the listeners' clock started (`h`)
    born_ms: int = 0
    """When the stream began (its `meta` record's timestamp): a cast removed and made again
    under the same id has another, so caches of what it holds key by it."""

    @property
    def length(self) -> int:
        """Records in the playable sequence."""
        return length_of(self.spans)

    @property
    def attempt(self) -> int:
        return self.start.attempt if self.start is not None else 0

    @property
    def terminal(self) -> bool:
        """Ends in eos or error (an error followed by `retry` is not terminal)."""
        return self.event in (Event.EOS, Event.ERROR)

    @property
    def touched_ms(self) -> int:
        """When the last record was appended (by its writer's clock)."""
        return self.last.timestamp if self.last is not None else 0

    @property
    def audio_ms(self) -> int:
        """The playable sequence's audio, in ms."""
        final = self.final
        return final.offset_ms + final.duration_ms if final is not None else 0


async def _one(store: Store, stream: str, seq: int, *, bodies: bool = True) -> Record | None:
    try:
        batch = await store.read(stream, seq, max_records=1, bodies=bodies)
    except SeqOutOfRange:
        return None
    return batch.records[0] if batch.records else None


async def _last(store: Store, stream: str, seq: int) -> Record | None:
    """The record at `seq` with its body, unless it is audio (a reader of the head needs only
    an audio record's headers, and the bodies of the small JSON records)."""
    record = await _one(store, stream, seq, bodies=False)
    if record is None or event_of(record) == Event.AUDIO:
        return record
    return await _one(store, stream, seq)


def _start_seq(record: Record) -> int | None:
    """The seq of the `start` of `record`'s attempt, from its `x` (or the old rule)."""
    value = record.header(H_START)
    if value is not None:
        return int(value)
    if event_of(record) == Event.AUDIO:
        index = record.header(H_INDEX)
        return record.seq_num - int(index) - 1 if index is not None else None
    return None


async def read_head(store: Store, cast_id: str) -> CastHead:
    """The head of `cast_id`'s stream (`CastHead(tail=0)` if there is no such cast)."""
    stream = cast_stream(cast_id)
    tail = await store.check_tail(stream)
    if tail == 0:
        return CastHead(0)
    first, last = await asyncio.gather(_one(store, stream, 0), _last(store, stream, tail - 1))
    if first is None or last is None:  # deleted meanwhile
        return CastHead(0)
    born_ms = first.timestamp
    try:
        meta: Meta | None = decode(first.body, Meta)
    except msgspec.DecodeError:
        meta = None
    event = event_of(last)
    failure = None
    if event == Event.ERROR:
        failure = _decoded(last, Failure)
    start_record: Record | None = None
    if event == Event.START:
        start_record = last
    elif event in (Event.AUDIO, Event.EOS, Event.ERROR, Event.RETRY):
        start_seq = _start_seq(last)
        if start_seq is None and last.seq_num > 1:  # an old eos or error: its last audio
            before = await _one(store, stream, last.seq_num - 1, bodies=False)
            if before is not None and event_of(before) == Event.START:
                start_seq = before.seq_num
            elif before is not None:
                start_seq = _start_seq(before)
        if start_seq is not None and 0 < start_seq < tail:
            start_record = await _one(store, stream, start_seq)
    start = _decoded(start_record, Start) if start_record is not None else None
    if start_record is None or start is None:
        return CastHead(tail, meta, event, last, failure=failure, born_ms=born_ms)
    start_seq = start_record.seq_num
    own = await _own(store, stream, last, start_seq)
    spans = playable_spans(start, start_seq, own)
    final = None
    origin_ms: int | None = None
    hold_ms = 0
    if spans:
        final_record = (
            last
            if event == Event.AUDIO
            else await _one(store, stream, seq_of(spans, length_of(spans) - 1), bodies=False)
        )
        final = audio_chunk(final_record) if final_record is not None else None
        first_seq = spans[0].seq
        head = (
            final_record
            if final_record is not None and final_record.seq_num == first_seq
            else await _one(store, stream, first_seq, bodies=False)
        )
        hold_ms = _hold_of(head)
        origin_ms = start.origin_ms or None
        if origin_ms is None and head is not None:
            origin_ms = head.timestamp + hold_ms
    return CastHead(
        tail,
        meta,
        event,
        last,
        start,
        start_seq,
        own,
        spans,
        final,
        origin_ms,
        failure,
        hold_ms,
        born_ms,
    )


def _hold_of(record: Record | None) -> int:
    """The start hold the playable sequence's first record states (`h`), in ms."""
    if record is None or event_of(record) != Event.AUDIO:
        return 0
    return audio_chunk(record).hold_ms


async def _own(store: Store, stream: str, last: Record, start_seq: int) -> int:
    """How many audio records the attempt opened at `start_seq` appended, `last` being the
    stream's last record."""
    if event_of(last) == Event.START:
        return 0
    # After the attempt's own audio come at most its terminal record and a retry.
    seq = last.seq_num
    record: Record | None = last
    for _ in range(2):
        if record is None or event_of(record) == Event.AUDIO or seq <= start_seq:
            break
        seq -= 1
        record = await _one(store, stream, seq, bodies=False)
    if record is None or event_of(record) != Event.AUDIO:
        return 0
    return seq - start_seq


def _decoded(record: Record | None, kind: type[T]) -> T | None:
    if record is None:
        return None
    try:
        return decode(record.body, kind)
    except msgspec.DecodeError:
        return None


async def resume_point(store: Store, cast_id: str, head: CastHead) -> AudioChunk | None:
    """The last record of the playable sequence that ends a chunk and carries a checkpoint
    (`k`): where a new attempt can go on. None if there is none (or the sequence is empty).
    Normally that is the last record; a chunk whose records did not all become durable (the
    worker died between two of its appends) leaves some after it."""
    if head.final is not None and head.final.resume:
        return head.final
    if not head.spans:
        return None
    stream = cast_stream(cast_id)
    last = head.length - 1
    for index in range(last - 1, max(last - _BACK, -1), -1):
        record = await _one(store, stream, seq_of(head.spans, index), bodies=False)
        if record is not None and record.header(H_RESUME):
            return audio_chunk(record)
    return None
