"""A cast's words, learnt a record at a time and kept per cast (`CastWords`).

A reader asking for a cast's words (`/words`, captions) gets those of its playable sequence as
it stands (`_captions`: each word placed by the durations of the records before it). Working
that out from the start on every request read every audio record again, bodies and all, and
built every word again: megabytes per request for a cast still generating. Here each cast's
words are kept as they were learnt, with the seq of each playable record they came from; a
request reads the cast's head (a few small reads, `read_head`), keeps the learnt records that
are still the head's playable sequence (a new attempt keeps a prefix of the one before, by
the same seqs), and reads only the records after them, without their bodies. So a request
costs the head and the records appended since the last one, whatever the cast's length.

The words of newly read records are decoded and placed on a worker thread, never on the event
loop. Callers asking at once share one refresh: a caller waits for the refresh that started
after it asked, never a second read of the same records. The cache holds the casts most
recently asked for, within a total word count; an entry is keyed by the stream's birth
(`CastHead.born_ms`), so a cast removed by retention and made again under its id starts over.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from speechd.durable import Record, Store
from speechd.errors import CastFailed, CastNotFound

from ._captions import CastCaptions, CastWord, placed
from ._playable import kept_spans, read_head
from ._records import Event, RecordSpan, audio_chunk
from ._streams import cast_stream

__all__ = ["CastWords", "cast_captions"]

_READ_RECORDS: Final = 256
_READ_BYTES: Final = 2 * 1024 * 1024  # headers only: each record's words, text and numbers
_MAX_WORDS: Final = 500_000
_MAX_CASTS: Final = 256


@dataclass(eq=False)
class _Learnt:
    """What is known of one cast's playable sequence: its first `len(at)` records."""

    born_ms: int
    runs: list[RecordSpan] = field(default_factory=list)  # those records' seqs, as spans
    ends: list[int] = field(default_factory=list)  # words learnt up to each record's end
    at: list[int] = field(default_factory=list)  # audio ms up to each record's end
    words: list[CastWord] = field(default_factory=list)
    unit: str = ""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    fresh_as_of: int = -1  # the ticket of the request its last refresh began after
    shown: CastCaptions | None = None  # the last snapshot, while nothing changed since

    @property
    def length(self) -> int:
        return len(self.at)

    @property
    def audio_ms(self) -> int:
        return self.at[-1] if self.at else 0

    def start_over(self, born_ms: int) -> None:
        self.born_ms = born_ms
        self.runs, self.ends, self.at, self.words, self.unit = [], [], [], [], ""
        self.shown = None

    def keep(self, spans: list[RecordSpan]) -> None:
        """Forget the records that are no longer in the playable sequence `spans`."""
        n = _shared(self.runs, spans)
        if n < self.length:
            self.shown = None
            self.runs = kept_spans(self.runs, n)
            del self.ends[n:], self.at[n:]
            del self.words[self.ends[-1] if self.ends else 0 :]
            if not self.at:
                self.unit = ""

    def snapshot(self) -> CastCaptions:
        """The words as they stand (the same object while nothing changed: copying the list
        is the one per-request cost that grows with the cast)."""
        if self.shown is None:
            self.shown = CastCaptions(list(self.words), self.unit, self.audio_ms, self.born_ms)
        return self.shown


def _shared(a: list[RecordSpan], b: list[RecordSpan]) -> int:
    """How many first records the playable sequences `a` and `b` share (the same seq at each
    index); each lists its records from index 0, densely."""
    n = i = j = 0
    while i < len(a) and j < len(b):
        x, y = a[i], b[j]
        if n >= x.index + x.count:
            i += 1
        elif n >= y.index + y.count:
            j += 1
        elif x.seq + n - x.index != y.seq + n - y.index:
            break
        else:
            n = min(x.index + x.count, y.index + y.count)
    return n


def _learn(learnt: _Learnt, records: Sequence[Record]) -> None:
    """Add `records` (the next playable records, in order, contiguous in the stream) to
    `learnt` (on a worker thread)."""
    if not records:
        return
    learnt.shown = None
    last = learnt.runs[-1] if learnt.runs else None
    first = records[0].seq_num
    if last is not None and last.seq + last.count == first:
        learnt.runs[-1] = RecordSpan(last.seq, last.index, last.count + len(records))
    else:
        learnt.runs.append(RecordSpan(first, learnt.length, len(records)))
    for record in records:
        chunk = audio_chunk(record)
        at = learnt.audio_ms
        learnt.words.extend(placed(word, at) for word in chunk.words)
        learnt.unit = learnt.unit or chunk.unit
        learnt.ends.append(len(learnt.words))
        learnt.at.append(at + chunk.duration_ms)


class CastWords:
    """The words of casts on one store, each cast's learnt once (see the module docstring).

    One per api process; safe to share between concurrent requests. `max_words` bounds the
    words kept in all (a cast with more is learnt afresh on each request), `max_casts` the
    casts."""

    def __init__(
        self, store: Store, *, max_words: int = _MAX_WORDS, max_casts: int = _MAX_CASTS
    ) -> None:
        self._store = store
        self._max_words = max_words
        self._max_casts = max_casts
        self._kept: OrderedDict[str, _Learnt] = OrderedDict()
        self._tickets = itertools.count()

    async def captions(self, cast_id: str) -> CastCaptions:
        """The words of the cast's playable sequence as it stands now (a live cast: those of
        the records that exist, without waiting for more). Raises `CastNotFound`, and
        `CastFailed` for a cast that ended in `error`."""
        ticket = next(self._tickets)
        learnt = self._kept.get(cast_id)
        if learnt is None:
            learnt = _Learnt(born_ms=-1)
            self._kept[cast_id] = learnt
        self._kept.move_to_end(cast_id)
        async with learnt.lock:
            if learnt.fresh_as_of > ticket:  # a refresh that began after we asked
                return learnt.snapshot()
            began = next(self._tickets)
            try:
                await self._refresh(cast_id, learnt)
            except BaseException:
                self._drop(cast_id, learnt)
                raise
            learnt.fresh_as_of = began
            captions = learnt.snapshot()
        self._bound()
        return captions

    async def _refresh(self, cast_id: str, learnt: _Learnt) -> None:
        head = await read_head(self._store, cast_id)
        if head.tail == 0 or head.meta is None:
            raise CastNotFound(f"No cast with id {cast_id!r}.", param="id")
        if head.event == Event.ERROR:
            message = head.failure.message if head.failure is not None else "unknown"
            raise CastFailed(f"The cast could not be synthesized: {message}")
        if learnt.born_ms != head.born_ms:  # new, or made again after it was removed
            learnt.start_over(head.born_ms)
        learnt.keep(head.spans)
        stream = cast_stream(cast_id)
        for span in head.spans:
            while learnt.length < span.index + span.count:
                seq = span.seq + learnt.length - span.index
                count = min(span.index + span.count - learnt.length, _READ_RECORDS)
                batch = await self._store.read(
                    stream, seq, max_records=count, max_bytes=_READ_BYTES, bodies=False
                )
                records = batch.records[:count]
                if not records:  # removed meanwhile: what was learnt stays as it was
                    return
                await asyncio.to_thread(_learn, learnt, records)

    def _drop(self, cast_id: str, learnt: _Learnt) -> None:
        if self._kept.get(cast_id) is learnt:
            del self._kept[cast_id]

    def _bound(self) -> None:
        """Keep within `max_casts` and `max_words`, the least recently asked for going first
        (a cast alone over the budget is not kept; one being refreshed stays until later)."""
        total = sum(len(learnt.words) for learnt in self._kept.values())
        for cast_id, learnt in list(self._kept.items()):
            if len(self._kept) <= self._max_casts and total <= self._max_words:
                return
            if not learnt.lock.locked():
                del self._kept[cast_id]
                total -= len(learnt.words)


async def cast_captions(store: Store, cast_id: str) -> CastCaptions:
    """The words of the cast's playable sequence as it stands now, read once (what
    `CastWords.captions` answers, kept nowhere). Raises `CastNotFound`, and `CastFailed` for a
    cast that ended in `error`."""
    return await CastWords(store, max_casts=0).captions(cast_id)
