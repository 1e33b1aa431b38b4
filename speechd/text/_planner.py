"""The incremental planner: text in (whole, or piece by piece as it arrives), chunks out, one
bounded step at a time.

    planner = engine.planner("af_heart", policy, text=text, done=True)
    while (step := planner.step()).status is not PlanStatus.DONE:
        if step.status is PlanStatus.CHUNK:
            render(step.chunk); keep(planner.position)

Each `step` does one of: normalise one slice of at most `SLICE_CHARS` raw characters
(`_slices` says where it ends), G2P one segment (`_g2p.split_segments`: at most 1,000
characters and a bounded cost), or cut a chunk (`Chunker`, the progressive `ChunkPolicy`). So
no step holds the caller for more than a few tens of milliseconds, whatever the text.

The plan is the one a whole-text plan makes (`iter_chunks` over the units of
`normalize_text`), with one difference by design: the G2P reads a text in segments, so
context does not cross a segment's end (a sentence end where there is one).

**Positions.** After each chunk, `position` is a short string that a new planner, given the
same text, policy and code, continues from with exactly the chunks this one makes next: the
slice the next unit comes from (raw offsets, how it ends, the `Carry` it starts with, a CRC of
its text), the units of it already in chunks, and the chunker's `index` and `buffered_s`.

**SSML** (`ssml=True`, a closed text): the planner plans what `_document.Document` makes of
the document, a bounded piece per step as the plan needs it; slices are cut at each event's
sentinel, and an event is a slice of its own whose unit (a pause, a mark) goes to the chunker
between the units around it. Positions count in that text, which the same document always
makes the same. `normalize=False` reads text with `read_raw_slice` (no normalisation); a
`lexicon` rewrites each normalised piece before G2P. Every unit carries its `source`.

**Live text.** `feed` pieces, then `close`. Slices end only where what has arrived allows (a
block, sentence or clause end; a word once the waiting text fills a chunk); text after the
last such place waits, unless `flush` is called (or `step` is told the input has been idle
`flush_s`): then all that has arrived is planned. A chunk whose text ends where the input
stopped ends there. Captions (chunk texts) joined with spaces are the normalised text,
word for word, but for: stray symbols without phonemes at the very end (dropped), and, for
live text only, a slice cut where the input paused is normalised apart from what followed
(a span's markup is then read as written, silently) and a block spoken before the next
block arrived has no closing `.`.
"""

from __future__ import annotations

import enum
import re
import zlib
from collections import deque
from collections.abc import Iterator
from typing import Final, NamedTuple

import msgspec

from ._chunks import Boundary, Chunk, Chunker, ChunkPolicy
from ._document import Document
from ._g2p import G2P
from ._lexicon import Lexicon
from ._normalize import SPAN, Carry, read_raw_slice, read_slice
from ._segments import (
    POSITION_VERSION,
    Position,
    Segment,
    Slice,
    decode_position,
    encode_position,
    event_segment,
    segment_units,
    segments,
)
from ._slices import SLICE_CHARS, Cut, closing, find_cut, last_alnum
from ._ssml import SENTINEL

__all__ = ["PlanStatus", "PlanStep", "Planner"]

#: English reads about one phoneme (token) per character of normalised text.
_TOKENS_PER_CHAR: Final = 1.0
#: A sentence's end in text not read yet, for an estimate: its mark (and a closing quote or
#: bracket) before a space or the piece's end; one character and a look ahead, so a scan is
#: linear whatever the text.
_SENTENCE_GAP: Final = re.compile("[.!?\u2026][\"')\\]}\u201d\u2019\u00bb]?(?=\\s|\\Z)")
#: How long live input may pause mid-clause before what has arrived is spoken anyway.
FLUSH_S: Final = 0.6


class PlanStatus(enum.Enum):
    CHUNK = "chunk"  # a chunk is ready: `PlanStep.chunk`
    MORE = "more"  # work was done: call `step` again
    INPUT = "input"  # waiting for text: `feed`, `close` or `flush` first
    DONE = "done"  # the input is closed and planned to its end


class PlanStep(NamedTuple):
    status: PlanStatus
    chunk: Chunk | None = None
    #: Raw characters of the text not yet in a chunk (an estimate inside the current slice).
    chars_left: int = 0




class Planner:
    """Plans one text for one G2P and policy; not thread-safe (one engine thread owns it)."""

    def __init__(
        self,
        g2p: G2P,
        policy: ChunkPolicy | None = None,
        *,
        text: str = "",
        done: bool = False,
        position: str | None = None,
        flush_s: float = FLUSH_S,
        slice_chars: int = SLICE_CHARS,
        ssml: bool = False,
        normalize: bool = True,
        lexicon: Lexicon | None = None,
    ) -> None:
        self._g2p = g2p
        self._normalize = normalize
        self._lexicon = lexicon
        self._doc: Document | None = None
        if ssml:
            if not done:
                raise ValueError("SSML is planned whole: a live text is plain")
            self._doc = Document(text, g2p.lang)
            text, done = "", False  # the document's text comes as the plan needs it
        self._lang = g2p.lang
        self._policy = policy or ChunkPolicy()
        self._flush_s = flush_s
        self._slice_chars = slice_chars
        # The text: raw[base:] is buf + "".join(pending).
        self._buf = ""
        self._base = 0
        self._pending: list[str] = []
        self._received = 0
        self._closed = False
        self._last_alnum = -1
        self._flush_at = -1  # flush(): plan all of raw[:flush_at] (while no more arrives)
        # The pipeline.
        self._cursor = 0
        self._carry = Carry()
        self._until: Position | None = None  # resume: the first slice, as it was cut
        self._skip = 0  # resume: units of it already spoken
        self._skipped = 0
        self._drop = 0
        self._made = 0  # units made (skipped ones included)
        self._slices: deque[Slice] = deque()
        self._segments: deque[Segment] = deque()
        self._chunker = Chunker(self._policy)
        if position is not None:
            self._resume(position)
        if text:
            self.feed(text)
        if done:
            self.close()

    # ------------------------------------------------------------------ input

    def feed(self, piece: str) -> None:
        """More text (a live cast's next piece)."""
        if self._closed:
            raise ValueError("the planner's input is closed")
        if self._drop:
            dropped = min(self._drop, len(piece))
            piece, self._drop = piece[dropped:], self._drop - dropped
        if not piece:
            return
        found = last_alnum(piece)
        if found >= 0:
            self._last_alnum = self._received + found
        self._pending.append(piece)
        self._received += len(piece)

    def close(self) -> None:
        """No more text: plan to the end."""
        self._closed = True

    def flush(self) -> None:
        """The input is idle: plan all that has arrived, unfinished clause included."""
        self._flush_at = self._received

    @property
    def closed(self) -> bool:
        return self._closed

    def retime(self, policy: ChunkPolicy) -> None:
        """Cut the chunks not cut yet with `policy`: the same policy timed anew (a device's
        costs as measured now, a quantum brought back or lifted), so only budgets change.
        A position taken after this continues with whatever policy its planner is given."""
        self._policy = policy
        self._chunker.policy = policy

    def estimate(self) -> list[int]:
        """The sizes (tokens) of the chunks the text not in a chunk yet is expected to make,
        from where the plan stands (`ChunkPolicy.estimate` over `tokens_left`, cut at the
        sentence ends of the units made and, at about a token a character, of the text not
        read yet): a lazily planned cast's rest, for its start hold. Reads all the text not
        in a chunk yet (once per cast: a scan, no G2P)."""
        chunker = self._chunker
        ends = chunker.sentence_ends()
        at = float(chunker.window_tokens)
        for text in self._unread():
            found = _SENTENCE_GAP.finditer(text)
            ends.extend(round(at + m.end() * _TOKENS_PER_CHAR) for m in found)
            at += len(text) * _TOKENS_PER_CHAR
        tokens = round(self.tokens_left)
        return self._policy.estimate(chunker.index, chunker.buffered_s, tokens, ends=ends)

    # ------------------------------------------------------------------ output

    def step(self, idle_s: float | None = None) -> PlanStep:
        """One bounded piece of work; `idle_s`: how long the input has been idle (live)."""
        chunk = self._chunker.cut()
        if chunk is not None:
            return self._emit(chunk)
        if (self._segments and self._g2p_step()) or (not self._segments and self._slice()):
            chunk = self._chunker.cut()
            return self._emit(chunk) if chunk is not None else PlanStep(PlanStatus.MORE)
        end = self._end_mark()
        if end is not None:
            chunk = self._chunker.cut(end)
            if chunk is not None:
                return self._emit(chunk)
            if end is Boundary.SENTENCE and self._exhausted():
                return PlanStep(PlanStatus.DONE)
        if idle_s is not None and idle_s >= self._flush_s and self._flush_at < self._received:
            self.flush()
            return PlanStep(PlanStatus.MORE, chars_left=self.chars_left)
        return PlanStep(PlanStatus.INPUT, chars_left=self.chars_left)

    def chunks(self) -> Iterator[Chunk]:
        """Every chunk of a closed text, stepping as needed."""
        if not self._closed and self._doc is None:
            raise ValueError("chunks() plans a closed text: close() the input first")
        while True:
            step = self.step()
            if step.status is PlanStatus.CHUNK:
                assert step.chunk is not None
                yield step.chunk
            elif step.status is not PlanStatus.MORE:  # DONE (INPUT cannot be: it is closed)
                return

    @property
    def position(self) -> str:
        """Where the plan stands, for a planner of the same text to continue from."""
        consumed = self._skipped + self._chunker.taken
        while len(self._slices) > 1 and self._spent(self._slices[0], consumed):
            self._slices.popleft()
        for sl in self._slices:
            if not self._spent(sl, consumed):
                units = 0 if sl.first_unit is None else consumed - sl.first_unit
                return self._encode(sl, units)
        if self._until is not None:  # resumed, and nothing of the first slice made yet
            return encode_position(self._until)
        # Everything before the cursor is in chunks; the next slice is not cut yet.
        index, buffered_s = self._chunker.index, self._chunker.buffered_s
        here = Position(
            POSITION_VERSION, self._cursor, -1, 0, self._carry, 0, 0, index, buffered_s
        )
        return encode_position(here)

    @property
    def chars_left(self) -> int:
        """Raw characters not yet in a chunk (estimated within the current slice)."""
        consumed = self._skipped + self._chunker.taken
        done = self._cursor
        for sl in self._slices:
            if not self._spent(sl, consumed):
                made = consumed - (sl.first_unit if sl.first_unit is not None else consumed)
                share = made / max(sl.made, 1) if sl.complete else 0.0
                done = sl.start + int((sl.end - sl.start) * min(max(share, 0.0), 1.0))
                break
        return max(self._received - done, 0)

    @property
    def tokens_left(self) -> float:
        """The tokens (phonemes) of the text not in a chunk yet: those of the units made and
        waiting to be cut, counted, then about one a character of the text not read by the
        G2P yet (its queued segments, normalised, and the raw text not sliced yet).

        Not `chars_left`: inside a slice the G2P has not finished, that counts the whole
        slice, the text already in chunks included (a 340-character text read as one slice
        still counted all 340 once its first two chunks were cut)."""
        unread = sum(len(s.text) for s in self._segments) + max(self._received - self._cursor, 0)
        if self._doc is not None:
            unread += self._doc.left  # about a character of text per character of SSML
        return self._chunker.window_tokens + unread * _TOKENS_PER_CHAR

    def _unread(self) -> Iterator[str]:
        """The text not read by the G2P yet, in order: its queued segments (normalised), then
        the raw text not sliced yet."""
        for segment in self._segments:
            yield segment.text.text
        yield self._buf[max(self._cursor - self._base, 0) :]
        yield from self._pending

    @property
    def audio_left_s(self) -> float:
        """A rough estimate of the audio the rest of the text makes (English-like rates)."""
        return self.tokens_left / self._policy.tokens_per_s / self._policy.speed

    # ------------------------------------------------------------------ internals

    @staticmethod
    def _spent(sl: Slice, consumed: int) -> bool:
        return sl.complete and sl.first_unit is not None and sl.first_unit + sl.made <= consumed

    def _encode(self, sl: Slice, units: int) -> str:
        return encode_position(
            Position(
                POSITION_VERSION,
                sl.start,
                sl.end,
                int(sl.kind),
                sl.carry,
                sl.crc,
                units,
                self._chunker.index,
                self._chunker.buffered_s,
            )
        )

    def _resume(self, position: str) -> None:
        try:
            where = decode_position(position)
        except msgspec.DecodeError as exc:
            raise ValueError(f"not a plan position: {exc}") from exc
        if where.version != POSITION_VERSION or where.start < 0 or where.units < 0:
            raise ValueError("not a plan position this planner reads")
        self._cursor = self._base = where.start
        self._received = where.start
        self._drop = where.start  # feed() drops the text before the slice: planned already
        self._carry = where.carry
        self._chunker = Chunker(self._policy, where.index, where.buffered_s)
        if where.end >= 0:
            self._until = where
            self._skip = where.units

    def _emit(self, chunk: Chunk) -> PlanStep:
        return PlanStep(PlanStatus.CHUNK, chunk, self.chars_left)

    def _text(self, stop: int) -> str:
        """The buffer, holding raw[base:stop] at least."""
        if self._pending and self._base + len(self._buf) < stop:
            keep = self._cursor - self._base
            if keep > len(self._buf) // 2:  # let go of what is planned (amortised)
                self._buf, self._base = self._buf[keep:], self._cursor
            self._buf += "".join(self._pending)
            self._pending.clear()
        return self._buf

    def _slice(self) -> bool:
        """Normalise the next slice; False when there is none to cut (yet)."""
        cursor, received = self._cursor, self._received
        doc = self._doc
        if doc is not None:
            doc.forget(cursor)  # no segment is queued: what is before the cursor is planned
        if doc is not None and not doc.done and received <= cursor + self._slice_chars + SPAN:
            self.feed(doc.read())  # the document's next piece first: read as needed
            if doc.done:
                self.close()
            return True
        if cursor >= received:
            return False
        if self._until is not None:
            where = self._until
            if received < where.end:
                if self._closed:
                    raise ValueError("the plan position lies past the end of the text")
                return False
            buf = self._text(where.end)
            end, kind = where.end, Cut(where.kind)
            if zlib.crc32(buf[cursor - self._base : end - self._base].encode()) != where.crc:
                raise ValueError("the plan position does not fit this text")
            self._until = None
        else:
            stop = min(cursor + self._slice_chars, received)
            buf = self._text(stop)
            cut = self._at_event(buf, cursor, stop) if doc is not None else None
            if cut is None:
                live = not self._closed and stop == received
                flushing = live and self._flush_at == received
                tokens = self._chunker.window_tokens + (received - cursor) * _TOKENS_PER_CHAR
                cut = find_cut(
                    buf,
                    cursor - self._base,
                    stop - self._base,
                    self._carry,
                    complete=self._closed and stop == received,
                    live=live,
                    fill=tokens > self._chunker.budget + 1,
                    flush=flushing,
                )
                if cut is None:
                    return False
                cut = (cut[0] + self._base, cut[1])
            end, kind = cut
        lo, hi = cursor - self._base, end - self._base
        sl = Slice(cursor, end, kind, self._carry, zlib.crc32(buf[lo:hi].encode()))
        self._slices.append(sl)
        if doc is not None and buf[lo] == SENTINEL:  # an event: a slice of its own
            self._cursor = end
            self._segments.append(event_segment(sl, doc.event(cursor)))
            return True
        if self._normalize:
            inside = kind < Cut.BLOCK
            pieces, carry = read_slice(
                buf, lo, hi, self._carry, self._lang, inside=inside, origin=self._base
            )
        else:
            pieces = read_raw_slice(buf, lo, hi, inside=kind < Cut.BLOCK, origin=self._base)
            carry = self._carry
        self._cursor, self._carry = end, carry
        dots = self._normalize  # a block closed with `.` is the normaliser's
        self._segments.extend(segments(sl, pieces, self._base, self._lexicon, dots=dots))
        return True

    def _at_event(self, buf: str, cursor: int, stop: int) -> tuple[int, Cut] | None:
        """The cut an event forces within raw[cursor:stop]: after its sentinel when the
        sentinel is next, else before it (a block's end when a line ends there, else inside
        the block, which goes on after the event); None when none is in reach."""
        lo = cursor - self._base
        if buf[lo] == SENTINEL:
            return cursor + 1, Cut.FORCED
        found = buf.find(SENTINEL, lo, stop - self._base)
        if found < 0:
            return None
        return found + self._base, Cut.BLOCK if buf[found - 1] == "\n" else Cut.FORCED

    def _dot(self, raw_end: int) -> bool | None:
        """Does a letter or digit follow raw offset `raw_end` (None: not known yet)?"""
        if self._last_alnum >= raw_end:
            return True
        if self._closed or self._flush_at == self._received >= raw_end:
            return False
        return None

    def _g2p_step(self) -> bool:
        """G2P the next segment; False when it waits for input (its closing `.`)."""
        segment = self._segments[0]
        text = segment.text
        if segment.dot_at is not None:
            dot = self._dot(segment.dot_at)
            if dot is None:
                return False
            text = closing(text, dot)
        self._segments.popleft()
        sl = segment.slice
        if segment.opens:
            sl.first_unit = self._made
        units = segment_units(segment, text, self._g2p, self._doc)
        for unit in units:
            if self._skip:
                self._skip -= 1
                self._skipped += 1
            else:
                self._chunker.push(unit)
        sl.made += len(units)
        self._made += len(units)
        if segment.closes:
            sl.complete = True
        return True

    def _exhausted(self) -> bool:
        return self._closed and self._cursor >= self._received and not self._segments

    def _end_mark(self) -> Boundary | None:
        """With no work left to do before more input: how good a place the end of the
        units made so far is to cut (None: none, wait)."""
        if self._segments:
            return None  # waiting on a closing `.`
        if self._exhausted():
            return Boundary.SENTENCE
        if self._closed:
            return None
        if self._flush_at == self._received:
            return Boundary.SENTENCE
        last = self._slices[-1].kind if self._slices else None
        if last in (Cut.BLOCK, Cut.SENTENCE, Cut.FORCED):
            return Boundary.SENTENCE
        return Boundary.CLAUSE if last is Cut.CLAUSE else None
