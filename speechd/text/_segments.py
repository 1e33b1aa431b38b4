"""The planner's slices and segments: what a slice of text becomes before the chunker.

A *slice* is a stretch of the planner's text normalised at once (`_slices` says where it
ends); its normalised pieces are cut into *segments* (`segments`), one G2P call each: at most
`_g2p.segment_spans`'s size, the lexicon applied first, each knowing whether it ends its
block and whether a closing `.` waits on the text after it. An SSML event's sentinel is a
slice of its own with one segment that makes its unit (`event_segment`). `segment_units`
makes a segment's units: the G2P's (each given its `source` and the slice's `rate`), or the
event's (a pause or a mark; a change of rate makes none). The planner keeps the slices to
count which of their units are in chunks, for its positions (`Position`: where a plan
stands, which a planner of the same text continues from).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import msgspec

from ._chunks import Unit
from ._document import Document, place_units
from ._g2p import G2P, segment_spans
from ._lexicon import Lexicon
from ._mapped import Mapped
from ._normalize import Carry, Piece
from ._slices import Cut, needs_dot
from ._ssml import Event

__all__ = [
    "POSITION_VERSION",
    "Position",
    "Segment",
    "Slice",
    "decode_position",
    "encode_position",
    "event_segment",
    "segment_units",
    "segments",
]

#: What a position means (bump it when that changes).
POSITION_VERSION: Final = 1


class Position(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    version: int
    start: int  # the slice the next unit comes from: raw[start:end]
    end: int  # -1: not cut yet (then units is 0 and the planner cuts it as it would)
    kind: int  # how it ends (`Cut`)
    carry: Carry
    crc: int  # zlib.crc32 of raw[start:end]
    units: int  # of its units, those already in chunks
    index: int  # the chunker's state
    buffered_s: float


_ENCODE = msgspec.json.Encoder()
_DECODE = msgspec.json.Decoder(Position)


def encode_position(position: Position) -> str:
    """A plan position as the short string the planner hands out."""
    return _ENCODE.encode(position).decode()


def decode_position(text: str) -> Position:
    """A plan position from its string (msgspec.DecodeError when it is not one)."""
    return _DECODE.decode(text)


@dataclass(slots=True)
class Slice:
    start: int
    end: int
    kind: Cut
    carry: Carry
    crc: int
    first_unit: int | None = None  # the number of its first unit, once G2P reaches it
    made: int = 0  # units G2P made of it so far
    complete: bool = False  # all of them


@dataclass(slots=True)
class Segment:
    slice: Slice
    text: Mapped
    final: bool  # its last unit ends a block
    dot_at: int | None  # a closing `.` depends on whether text follows this raw offset
    opens: bool  # the slice's first
    closes: bool  # the slice's last
    event: Event | None = None  # an event's slice: its one unit (a pause, a mark) or none


def segments(
    sl: Slice, pieces: list[Piece], base: int, lexicon: Lexicon | None, *, dots: bool
) -> list[Segment]:
    """A slice's segments (`base`: the raw offset of the pieces' `raw_end` 0; `dots`: a
    block without closing punctuation gets a `.` when text follows it)."""
    queued: list[Segment] = []
    for piece in pieces:
        if not any(c.isalnum() for c in piece.text.text):
            continue  # as normalize_text drops it
        text = lexicon.apply(piece.text) if lexicon else piece.text
        # The text's first segment is short, so the first chunk comes quickly.
        spans = segment_spans(text.text, first=sl.start == 0 and not queued)
        dot_at = piece.raw_end + base if dots and piece.final and needs_dot(text.text) else None
        for i, (a, b) in enumerate(spans):
            last = i == len(spans) - 1
            queued.append(
                Segment(sl, text[a:b], piece.final and last, dot_at if last else None, False, False)
            )
    if not queued:
        queued.append(Segment(sl, Mapped("", offset=sl.start), False, None, False, False))
    queued[0].opens = True
    queued[-1].closes = True
    return queued


def event_segment(sl: Slice, event: Event) -> Segment:
    """The one segment of an event's slice."""
    return Segment(sl, Mapped("", offset=sl.start), False, None, True, True, event)


def segment_units(segment: Segment, text: Mapped, g2p: G2P, doc: Document | None) -> list[Unit]:
    """The units of a segment whose text (its closing `.` decided) is `text`."""
    if segment.event is not None:
        return _event_units(segment.event)
    units = g2p.units(text.text) if text.text else []
    place_units(units, text, doc)
    rate = doc.rate_at(segment.slice.start) if doc is not None else 1.0
    for unit in units:
        unit.rate = rate
    if units:
        last = units[-1]
        if not last.text.endswith((" ", "\n")):
            last.text += " "
            last.phonemes += " "
        last.block_end = segment.final
    return units


def _event_units(event: Event) -> list[Unit]:
    """The unit an event's slice makes: a pause or a mark (a change of rate makes none)."""
    if event.pause_ms:
        return [Unit("", "", source=event.source, pause_ms=event.pause_ms)]
    if event.mark:
        return [Unit("", "", source=event.source, mark=event.mark)]
    return []
