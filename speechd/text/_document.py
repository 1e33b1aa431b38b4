"""The front end's side of the planner: an SSML input read into planner text a piece at a
time, and where each unit the planner makes came from in the input as sent.

The planner plans *planner text*: for plain text that is the input itself; for SSML it is
what `SsmlReader` makes of the document (`Document.read`, one bounded piece per planning
step), with one `SENTINEL` per event. `Document` keeps, for every character of planner text
made and not yet planned, the SSML it came from (`source`), the events its sentinels stand
for (`event`), and the `prosody` rate in force (`rate_at`, from the rate events: a position
resumed in the middle of a document knows it without the events before it).

`place_units` gives each unit the G2P made of a segment its `source`: misaki gives one unit
per word (a phrase G2P one per phrase), each the words of the segment between two spaces in
order, so unit k covers the next `words in it` words of the segment, markup read as the
word it marks; the segment's map (`Mapped`) says where those characters came from.
"""

from __future__ import annotations

import bisect
import math
import re
from array import array
from collections.abc import Sequence

from ._chunks import Unit
from ._mapped import Mapped
from ._ssml import SENTINEL, Event, SsmlReader

__all__ = ["Document", "place_units"]

#: Pronunciation markup in a segment, read as the word it marks when words are counted.
_MARKUP = re.compile(r"\[([^\[\]\n]{1,100})\]\([^()\n]{1,202}\)")
_EDGES = ".,;:!?\"'()[]{}\u201c\u201d\u2018\u2019\u00ab\u00bb\u2026\u2014\u2013-*_~`"
#: Planner text read ahead of need, per planning step (characters of SSML).
READ_CHARS = 4096


class Document:
    """An SSML input as the planner reads it (see the module docstring)."""

    def __init__(self, ssml: str, lang: str) -> None:
        # The api checked the rates against the request's speed; the engine clamps.
        self._reader = SsmlReader(ssml, lang, speed_bounds=(0.0, math.inf))
        self._begins = array("q")
        self._ends = array("q")
        self._base = 0  # the planner offset of _begins[0]
        self._made = 0  # planner text made so far
        self._events: dict[int, Event] = {}
        self._rate_at: list[int] = [0]  # planner offsets where a rate starts, and the rates
        self._rates: list[float] = [1.0]

    @property
    def done(self) -> bool:
        return self._reader.done

    @property
    def left(self) -> int:
        """Characters of the document not read yet."""
        return self._reader.left

    def read(self) -> str:
        """The next piece of planner text (SsmlError where the document breaks a rule)."""
        piece, events = self._reader.read(READ_CHARS)
        if piece.text:
            begins, ends = piece._maps()
            self._begins.extend(begins)
            self._ends.extend(ends)
            at = -1
            for event in events:
                at = piece.text.index(SENTINEL, at + 1)
                offset = self._made + at
                self._events[offset] = event
                if event.rate is not None:
                    self._rate_at.append(offset + 1)
                    self._rates.append(event.rate)
        self._made += len(piece)
        return piece.text

    def event(self, offset: int) -> Event:
        """What the sentinel at planner offset `offset` stands for."""
        return self._events.pop(offset, Event())

    def rate_at(self, offset: int) -> float:
        """The speed factor of the planner text at `offset`."""
        return self._rates[bisect.bisect_right(self._rate_at, offset) - 1]

    def source(self, a: int, b: int) -> tuple[int, int]:
        """Where planner text [a, b) is in the SSML, [begin, end)."""
        first = min(max(a - self._base, 0), len(self._begins) - 1)
        last = min(max(b - 1 - self._base, first), len(self._ends) - 1)
        if first < 0:
            return -1, -1
        return self._begins[first], self._ends[last]

    def forget(self, before: int) -> None:
        """Planner text before `before` is planned: let go of its map and events."""
        before = min(before, self._made)
        drop = before - self._base
        if drop > len(self._begins) // 2 and drop > 0:  # amortised
            del self._begins[:drop]
            del self._ends[:drop]
            self._base = before
            for offset in [o for o in self._events if o < before]:
                del self._events[offset]


def place_units(units: Sequence[Unit], text: Mapped, document: Document | None) -> None:
    """Give each unit made of segment `text` its `source` (see the module docstring)."""
    visible = text
    if "](" in text.text:
        visible = text.sub(_MARKUP, lambda m: text.at(m.group(1), *m.span()))
    words = visible.words()
    k = 0
    for unit in units:
        core = unit.text.strip()
        if not core:
            continue
        n = core.count(" ") + 1
        if k >= len(words):
            a = b = len(visible)
        else:
            a, b = words[k][0], words[min(k + n, len(words)) - 1][1]
        k += n
        # A word's place is its letters (punctuation around it is a pause, not the word).
        word = visible.text[a:b]
        core = word.strip(_EDGES)
        if core and any(c.isalnum() for c in core):
            a += word.index(core)
            b = a + len(core)
        begin, end = visible.source(a, b)
        if document is not None and end > begin:
            begin, end = document.source(begin, end)
        unit.source = (begin, end)
