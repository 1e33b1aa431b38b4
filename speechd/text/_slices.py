"""Where a slice of text may end, so that slices normalise exactly as the whole text would.

`find_cut` looks at most `SLICE_CHARS` characters ahead and ends a slice, in this order:

1. at a block boundary: after a line that ends its block whatever comes next (a blank line,
   a heading, a line ending a sentence; `_normalize.block_state` says);
2. inside a block, at a space between two words where no normaliser rule can span the cut:
   after a sentence end (`.`, `!`, `?` after a letter) before a capital; else after a clause
   or comma (`;`, `:`, `,`) before a letter; else between two words (letters on both sides).
   No rule spans such a cut: no digit touches it (times, units, ranges, phone numbers have
   a space between digits and words), the word before is not an abbreviation (`Jan.`,
   `et al.`, `w/o` read what follows), URLs and addresses hold no space, and no inline span
   can cross it: within `SPAN` characters on both sides there is no unclosed `[`, `(` or `<`
   before and its closer after, and no `*`, `_`, `~`, backtick or entity on both sides;
3. only a window that offers none of these (dense markup, or no space in `SLICE_CHARS`
   characters: hostile text) is cut at its last space, or at its end (never inside an
   entity, a `\\r\\n` or before a combining mark): a rule that would span that cut reads the
   two sides apart.

A slice that begins after a cut of kind 2 starts inside a block (`Carry.open`); a span that
would cross it cannot begin before the slice, since it would have crossed the previous cut.

Text that is still arriving (a live cast) ends a slice only at a block boundary or a
sentence or clause end of what has arrived (the rest waits), at a word when the waiting
text already fills a chunk (`fill`), or where the input stops, when it has been idle
(`flush`). A span opened within `SPAN` characters before such a cut and not closed in what
has arrived counts as crossing it (its closer may be in what has not), so the text waits
there too. Live slices are as exact as closed ones, but for what the input had not sent yet
when a slice was cut there (the capital after a sentence end; anything after a `flush`).
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Iterator
from enum import IntEnum
from typing import Final

from ._english import ABBREVIATIONS
from ._mapped import Mapped
from ._normalize import (
    CLOSERS,
    SPAN,
    TERMINAL,
    Carry,
    Piece,
    block_state,
    lines,
    read_slice,
)

__all__ = ["SLICE_CHARS", "Cut", "find_cut", "iter_pieces", "normalize_slices", "normalize_text"]

#: The most raw characters one slice holds: normalising them takes a few ms on a slow CPU.
SLICE_CHARS: Final = 2000


class Cut(IntEnum):
    """How a slice ends (higher is a better place)."""

    FORCED = 0  # no safe place: the window's last space or end, or an idle live input
    WORD = 1
    CLAUSE = 2
    SENTENCE = 3
    BLOCK = 4
    END = 5  # the end of the text


_RUN = re.compile(r"[ \t]+")
_DANGER = re.compile(r"[\[\]()<>*_~`&]")
_OPENERS: Final = "\"'(\u201c\u2018\u00ab"
_SENTENCE_END: Final = ".!?\u2026"
#: misaki's own abbreviations and initials (a cut after them splits a name from its title).
_NOT_SENTENCE = re.compile(r"(?:Mr|Mrs|Ms|Dr|St|Mt|vs|No|[A-Za-z])\.")
_ENTITY_START = re.compile(r"&(?:#|[A-Za-z]{2,31};)")
_PAIRS: Final = (("[", "]"), ("(", ")"), ("<", ">"))


class _Danger:
    """Where markup characters sit in a window, to ask of a cut: could a span cross it?"""

    def __init__(self, raw: str, lo: int, hi: int, *, unsent: bool = False) -> None:
        self.lo = lo
        self.hi = hi
        # Live text: what follows `hi` has not arrived yet, so a closer may still come.
        self.unsent = unsent
        self.at: dict[str, list[int]] = {}
        for m in _DANGER.finditer(raw, lo, hi):
            c = m.group()
            if c == "&" and not _ENTITY_START.match(raw, m.start()):
                continue
            kind = next((o + e for o, e in _PAIRS if c in (o, e)), c)
            self.at.setdefault(kind, []).append(m.start())
        self.raw = raw

    def crosses(self, a: int, b: int) -> bool:
        """Could an inline span cover the whitespace raw[a:b]?"""
        first = max(self.lo, a - SPAN)
        last = b + SPAN
        for kind, spots in self.at.items():
            i = bisect.bisect_left(spots, a)
            j = bisect.bisect_left(spots, b)
            before = spots[i - 1] if i and spots[i - 1] >= first else None
            after = spots[j] if j < len(spots) and spots[j] < last else None
            # A span opened before the cut and not closed in what has arrived: its closer
            # may be in what has not (a cut there would split `[the | guide](u)`).
            unclosed = before is not None and after is None and self.unsent and last > self.hi
            if unclosed and (len(kind) == 1 or self.raw[before] == kind[0]):
                return True
            if before is None or after is None:
                continue
            if len(kind) == 1:  # symmetric markers: one on each side
                return True
            if self.raw[before] == kind[0] and self.raw[after] == kind[1]:
                return True  # the nearest bracket before opens, the nearest after closes
        return False


def _kind(left: str, right: str) -> Cut:
    """The cut between two words, by the words alone (markup checked apart)."""
    if left[-1].isdigit() or right[0].isdigit():
        return Cut.FORCED
    bare = left.rstrip(CLOSERS)
    if bare in ABBREVIATIONS or left in ABBREVIATIONS or _NOT_SENTENCE.fullmatch(bare):
        return Cut.FORCED
    word = right.lstrip(_OPENERS)
    if not word or not word[0].isalpha() or len(bare) < 2:
        return Cut.FORCED
    end, before = bare[-1], bare[-2]
    if end in _SENTENCE_END and before.isalpha():
        return Cut.SENTENCE if word[0].isupper() else Cut.FORCED
    if end in ";:," and before.isalpha():
        return Cut.CLAUSE
    if end.isalpha() and "/" not in left:
        return Cut.WORD
    return Cut.FORCED


def find_cut(
    raw: str,
    start: int,
    stop: int,
    carry: Carry,
    *,
    complete: bool,
    live: bool = False,
    fill: bool = False,
    flush: bool = False,
) -> tuple[int, Cut] | None:
    """Where the slice starting at `start` ends, looking no further than `stop`.

    complete: raw[:stop] is the whole text. live: more text may follow `stop` later (it is
    all that has arrived); then None means: wait for more (or `fill`, or `flush`).
    """
    if complete:
        return stop, Cut.END
    if live and flush:
        return (stop, Cut.FORCED) if stop > start else None
    spans = list(lines(raw, start, stop))
    if spans and spans[-1][2] == stop and spans[-1][1] == stop:
        whole, open_line = spans[:-1], spans[-1]
    else:
        whole, open_line = spans, None
    half = raw[stop : stop + 1] == "\n" or (live and stop == len(raw))  # of a "\r\n"
    if whole and whole[-1][2] == stop and raw[whole[-1][1] : stop] == "\r" and half:
        whole, open_line = whole[:-1], (whole[-1][0], stop - 1, stop - 1)
    block = start
    for following, boundary in block_state(raw, whole, carry):
        if boundary:
            block = following
    # Cuts inside the block still open at the window's end.
    danger = _Danger(raw, start, min(stop + SPAN, len(raw)), unsent=live)
    best: dict[Cut, int] = {}
    region = [s for s in whole if s[0] >= block]
    if open_line is not None:
        region.append(open_line)
    for line_start, line_end, _ in reversed(region):
        runs = [(m.start(), m.end()) for m in _RUN.finditer(raw, line_start, line_end)]
        for i in range(len(runs) - 1, -1, -1):
            a, b = runs[i]
            if a == line_start or b == line_end:
                continue
            left = raw[runs[i - 1][1] if i else line_start : a]
            right = raw[b : runs[i + 1][0] if i + 1 < len(runs) else line_end]
            kind = _kind(left, right)
            if kind > Cut.FORCED and danger.crosses(a, b):
                kind = Cut.FORCED
            if kind == Cut.FORCED and (live or _mark(raw[b])):
                continue
            best.setdefault(kind, b)
            if kind == Cut.SENTENCE:
                break
        if Cut.SENTENCE in best:
            break
    at_block = (block, Cut.BLOCK) if block > start else None
    choices = [c for c in (at_block, _at(best, Cut.SENTENCE)) if c]
    if live:
        choices.append(_at(best, Cut.CLAUSE))
    choices = [c for c in choices if c]
    if choices:
        return max(choices)
    if live and not fill:
        return None
    for kind in (() if live else (Cut.CLAUSE,)) + (Cut.WORD, Cut.FORCED):
        if kind in best:
            return best[kind], kind
    if live:
        return None
    return _hard_cut(raw, start, stop), Cut.FORCED


def _at(best: dict[Cut, int], kind: Cut) -> tuple[int, Cut] | None:
    return (best[kind], kind) if kind in best else None


def _mark(c: str) -> bool:
    return bool(unicodedata.combining(c))


def _hard_cut(raw: str, start: int, stop: int) -> int:
    """A window without a single usable space: cut near its end, but not inside an entity,
    a `\\r\\n`, before a combining mark or right after a line break."""
    cut = stop
    amp = raw.rfind("&", max(start, cut - 40), cut)
    if amp > start and ";" not in raw[amp:cut] and " " not in raw[amp:cut]:
        cut = amp
    # Past 17 steps back the marks are dropped anyway (`_normalize._MAX_MARKS`).
    floor = max(start + 1, cut - 17)
    while cut > floor and cut < len(raw) and (_mark(raw[cut]) or raw[cut - 1] in "\r\n\x0b\x0c"):
        cut -= 1
    return cut


def last_alnum(text: str, start: int = 0) -> int:
    """The offset of the last letter or digit of text[start:], or -1."""
    found = _LAST_ALNUM.search(text, start)
    return found.start() if found else -1


_LAST_ALNUM = re.compile(r"[^\W_](?=[\W_]*\Z)")


def iter_pieces(
    text: str, lang: str, *, slice_chars: int = SLICE_CHARS
) -> Iterator[tuple[Piece, bool]]:
    """The normalised pieces of a whole text, each with whether its block earns a `.`."""
    end_alnum = last_alnum(text)
    pos = 0
    carry = Carry()
    while pos < len(text):
        stop = min(pos + slice_chars, len(text))
        cut = find_cut(text, pos, stop, carry, complete=stop == len(text))
        assert cut is not None  # a closed text always ends a slice
        end, kind = cut
        pieces, carry = read_slice(text, pos, end, carry, lang, inside=kind < Cut.BLOCK)
        for piece in pieces:
            yield piece, piece.final and end_alnum >= piece.raw_end
        pos = end


def needs_dot(text: str) -> bool:
    """Does a block's last piece lack its closing punctuation?"""
    return bool(text) and text.rstrip(CLOSERS)[-1:] not in TERMINAL


def closing(text: Mapped, dot: bool) -> Mapped:
    """A block's last piece, closed with `.` when it earns one and ends without one."""
    return text + "." if dot and needs_dot(text.text) else text


def normalize_text(text: str, lang: str = "a") -> str:
    """Make pasted text speakable for the language `lang` (a voice's prefix letter).

    One block (paragraph, heading, list item, ...) per line, single spaces inside; never
    starts or ends with whitespace; may be empty (text of emoji only).
    """
    return normalize_slices(text, lang)


def normalize_slices(text: str, lang: str, *, slice_chars: int = SLICE_CHARS) -> str:
    """`normalize_text`, read in slices of at most `slice_chars` characters."""
    out: list[str] = []
    block: list[str] = []
    for piece, dot in iter_pieces(text, lang, slice_chars=slice_chars):
        if any(c.isalnum() for c in piece.text.text):
            block.append((closing(piece.text, dot) if piece.final else piece.text).text)
        if piece.final and block:
            out.append(" ".join(block))
            block = []
    if block:
        out.append(" ".join(block))
    return "\n".join(out)
