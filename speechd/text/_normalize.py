"""What users paste, made speakable, one slice of text at a time.

misaki (the English G2P) already reads cardinals, ordinals, years, decimals, `$`/`£`/`€`
amounts, `%`, `&`, `+`, `@`, `Dr.`, `Mr.`, `Mrs.`, `vs.`, `e.g.`, `i.e.`, `etc.` and `No. 5`
well, so those are left alone. This module does what misaki does not:

* every language: Unicode NFC, HTML entities and tags, control and zero-width characters,
  odd spaces, emoji, Markdown (headings, emphasis, code, links, images, lists, quotes,
  tables, rules), repeated `!!!`/`???`, soft-wrapped lines joined, and a `.` closing each
  block (heading, list item, paragraph) that lacks one when any letter or digit follows it
  in the text, so blocks are read as sentences; a run of more than 48 characters without a
  space is cut into pieces of 48 (no G2P word is longer);
* English (`a`, `b`): see `_english` (URLs, e-mail addresses, dates, times, numbers, units,
  abbreviations).

The text is read a line at a time (`read_slice`): `Carry` is all a slice needs to know of the
text before it, so a long text is normalised in bounded slices (`_slices` says where they may
end) and the slices together read exactly as the whole would. Every pattern is linear on any
input: quantifiers are bounded (an inline span holds at most `SPAN` characters), the text a
rule scans excludes the character that opens it (so no two attempts scan the same text), and
what a pattern would have to backtrack over is a small scanner instead (headings, rules,
tables, code spans). misaki's inline pronunciation markup, `[word](/phonemes/)`, is kept for
English.

Text travels as `Mapped` (`_mapped`): every character knows the characters of the raw text it
came from, so the words spoken map back to what the user sent (a rule's output maps to its
whole match; what a rule keeps, a link's text say, keeps its own place).

`normalize=False` on a request skips all of this but the cleaning a G2P needs (control and
odd-space characters, words cut at 48 characters): `read_raw_slice`.
"""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Iterable
from typing import Final, NamedTuple

import msgspec

from ._inline import LONG_RUN, MULTI_SPACE, SPAN, WORD_CHARS, normalize_piece, split_run
from ._mapped import Mapped

__all__ = [
    "CLOSERS",
    "SPAN",
    "TERMINAL",
    "Carry",
    "Piece",
    "block_state",
    "clean_line",
    "lines",
    "normalize_piece",
    "read_raw_slice",
    "read_slice",
]

#: Combining marks kept on one character (Unicode's canonical reordering is quadratic).
_MAX_MARKS: Final = 16

# ---------------------------------------------------------------- characters

LINE_BREAK: Final = re.compile(r"\r\n|[\n\r\x0b\x0c\x85\u2028\u2029]")
_BREAK_CHARS: Final = frozenset("\n\r\x0b\x0c\x85\u2028\u2029")
#: html.unescape's own pattern with bounded numbers: `&#` and 5,000 digits would make it
#: convert them all (a ValueError past 4,300 digits); this reads 7 and leaves the rest.
_ENTITY = re.compile(r"&(?:#[0-9]{1,7};?|#[xX][0-9a-fA-F]{1,6};?|[^\t\n\f <&#;]{1,32};?)")
_ZERO_WIDTH = re.compile(r"[\u00ad\u180e\u200b-\u200d\u2060\ufeff]")
_SPACES = re.compile(r"[\t\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]")
#: ASCII control characters go; tabs and line breaks (from entities) become spaces.
_ASCII_CONTROL: Final = {
    **dict.fromkeys([*range(32), 127]),
    **dict.fromkeys(map(ord, "\t\n\r\x0b\x0c"), " "),
}
_EMOJI = re.compile(
    "["
    "\U0001f000-\U0001faff"  # cards, enclosed, pictographs, emoticons, transport, ...
    "\u2600-\u27bf"  # misc symbols, dingbats
    "\u2b00-\u2bff"  # arrows and stars used as emoji (⭐, ⬆)
    "\u231a\u231b\u23e9-\u23fa\u24c2\u3030\u303d\u3297\u3299"
    "\ufe00-\ufe0f\u20e3"  # variation selectors, keycap
    "\U000e0020-\U000e007f"  # tag sequences (flags)
    "\U0001f3fb-\U0001f3ff"  # skin tones
    "]+"
)


def clean_line(line: Mapped) -> Mapped:
    """One line (no line break) of pasted text: entities decoded, NFC, no control, zero-width
    or odd-space characters, no emoji; a line break an entity decodes to becomes a space."""
    if "&" in line.text:
        line = line.sub(_ENTITY, lambda m: html.unescape(m.group(0)))
    if line.text.isascii():
        if line.text.translate(_ASCII_CONTROL) == line.text:
            return line
        return line.keep(lambda c: _ASCII_CONTROL.get(ord(c), c))
    line = _nfc(_cap_marks(line))
    line = line.sub(_ZERO_WIDTH, "").sub(_SPACES, " ").sub(_EMOJI, " ")
    # Control, format, unassigned and private-use characters (the last are our placeholders).
    return line.keep(_visible)


def _visible(c: str) -> str | None:
    if c in _BREAK_CHARS:
        return " "
    return c if unicodedata.category(c)[0] != "C" else None


_TOKEN = re.compile(r"\S+")


def _nfc(line: Mapped) -> Mapped:
    """NFC, word by word (no canonical composition or reordering crosses a space), so a
    word that changes maps to itself."""
    if unicodedata.is_normalized("NFC", line.text):
        return line
    return line.sub(_TOKEN, lambda m: unicodedata.normalize("NFC", m.group(0)))


def _cap_marks(text: Mapped) -> Mapped:
    """At most `_MAX_MARKS` combining marks in a row (what NFC must sort stays small)."""
    run = 0

    def wanted(c: str) -> str | None:
        nonlocal run
        if unicodedata.combining(c):
            run += 1
            return None if run > _MAX_MARKS else c
        run = 0
        return c

    return text.keep(wanted)


# ---------------------------------------------------------------- markdown blocks

_FENCE = re.compile(r"\s*(?:```|~~~)")
_QUOTE = re.compile(r"\s*(?:>\s?)+")
_BULLET = re.compile(r"\s*[-*+•◦▪‣]\s+")
_ORDERED = re.compile(r"\s*\d{1,3}[.)]\s+")
_REF_DEF = re.compile(r"\[[^\[\]\n]{1,300}\]:\s+\S")
_CELL_RULE = re.compile(r":?-{3,}:?")
TERMINAL: Final = ".!?…:;"
CLOSERS: Final = "\"'\u201d\u2019)]\u00bb"
#: A line this long that ends without punctuation is taken as hard-wrapped prose.
_WRAP_WIDTH: Final = 40


class Carry(msgspec.Struct, array_like=True, frozen=True, forbid_unknown_fields=True):
    """What a slice must know of the text before it (kept in plan positions: only append
    fields, with defaults).

    fence: inside a fenced code block. open: 0 at a line start between blocks; 1 (2) the
    slice starts inside a line of a paragraph (of a fenced block), whose text before the
    slice is `line_len` characters long and ends in `tail` (closers stripped).
    """

    fence: bool = False
    open: int = 0
    line_len: int = 0
    tail: str = ""


class Piece(NamedTuple):
    """A block (or a slice of one) normalised: one line of text, maybe empty."""

    text: Mapped
    #: It ends its block; then `raw_end` is where the block ends in the raw text (a letter or
    #: digit after it earns the block a closing `.`).
    final: bool
    raw_end: int


def _heading(line: Mapped) -> Mapped | None:
    raw = line.text
    hashes = len(raw) - len(raw.lstrip("#"))
    if not 1 <= hashes <= 6 or len(raw) == hashes or not raw[hashes].isspace():
        return None
    text = line[hashes:].strip()
    bare = text.rstrip("#")
    if bare.text != text.text and bare.text[-1:].isspace():  # a closing run of `#`
        text = bare.rstrip()
    return text


def _is_rule(line: str) -> bool:
    c = line[:1]
    return c in ("-", "*", "_", "=") and line.count(c) >= 3 and not line.replace(c, "").strip()


def _is_table_rule(line: str) -> bool:
    inner = line[1:] if line.startswith("|") else line
    inner = inner[:-1] if inner.endswith("|") else inner
    return all(_CELL_RULE.fullmatch(cell.strip()) for cell in inner.split("|"))


def joins(tail: str, length: int) -> bool:
    """Does a line break after a line of `length` ending in `tail` continue the sentence?"""
    tail = tail.rstrip(CLOSERS)
    if not tail or tail[-1] in TERMINAL:
        return False
    return length >= _WRAP_WIDTH or tail[-1] in ",\u2014\u2013-"


class _Reader:
    """Markdown blocks from lines, a line (or a piece of one) at a time."""

    def __init__(self, carry: Carry) -> None:
        self.fence = carry.fence
        self.blocks: list[tuple[Mapped, bool, int]] = []  # (markup-level text, final, raw end)
        self.para: list[Mapped] = []
        self.para_end = 0
        #: The open paragraph began before this slice (its first part is already out).
        self.continued = carry.open == 1
        self.tail = carry.tail
        self.length = carry.line_len
        self._resume = carry.open

    def boundary(self) -> bool:
        """After the last line: would the next line start a new block, whatever it says?"""
        return not (self.para or self.continued) or not joins(self.tail, self.length)

    def line(self, raw: Mapped, raw_end: int, *, whole: bool) -> None:
        """A cleaned line; `whole` False: only its start, the slice ends inside it."""
        resume, self._resume = self._resume, 0
        if resume == 2:  # the rest of a fenced line
            self.blocks.append((raw, whole, raw_end))
            return
        if resume == 1:  # the rest of a paragraph's line
            text = raw.rstrip() if whole else raw
            self._append(text.strip(), raw_end, self.length + len(text))
            return
        if _FENCE.match(raw.text):
            self._flush()
            self.fence = not self.fence
            return
        if self.fence:
            self._flush()
            self.blocks.append((raw, whole, raw_end))
            return
        quote = _QUOTE.match(raw.text)
        line = (raw[quote.end() :] if quote else raw).lstrip()
        shown = line.rstrip() if whole else line  # `length` counts the spaces before a cut
        line = line.rstrip()
        bare = line.text
        if not bare or (whole and (_is_rule(bare) or _is_table_rule(bare) or _REF_DEF.match(bare))):
            self._flush()
            return
        heading = _heading(line)
        if heading is not None:
            self._flush()
            if whole:
                self.blocks.append((heading, True, raw_end))
            else:
                self._append(heading, raw_end, len(shown))
            return
        if whole and bare.startswith("|") and bare.endswith("|") and len(bare) > 1:
            self._flush()
            self.blocks.append((_cells(line), True, raw_end))
            return
        item = _BULLET.match(bare)
        if item:
            self._flush()
            text = line[item.end() :]
            self._append(text, raw_end, len(shown) - item.end())
            return
        if _ORDERED.match(bare) or (
            (self.para or self.continued) and not joins(self.tail, self.length)
        ):
            self._flush()
        self._append(line, raw_end, len(shown))

    def _append(self, text: Mapped, raw_end: int, length: int) -> None:
        if text.text:
            self.para.append(text)
            self.tail = text.text.rstrip(CLOSERS)[-1:]
        self.length = length
        self.para_end = raw_end

    def _flush(self, final: bool = True) -> None:
        if self.para or self.continued:
            self.blocks.append((Mapped.join(" ", self.para), final, self.para_end))
        self.para = []
        self.continued = False

    def finish(self, inside: bool) -> Carry:
        """End the slice: at a block boundary, or `inside` a line (the block stays open)."""
        if not inside:
            self._flush()
            return Carry(self.fence)
        if self.fence:  # the fenced line's start is out already
            return Carry(True, 2)
        self._flush(final=False)
        return Carry(False, 1, self.length, self.tail)


def _cells(line: Mapped) -> Mapped:
    """A table row `| a | b |` read as `a, b`."""
    cells: list[Mapped] = []
    pos = 1
    inner = len(line) - 1
    while pos <= inner:
        bar = line.text.find("|", pos, inner)
        end = inner if bar < 0 else bar
        cell = line[pos:end].strip()
        if cell.text:
            cells.append(cell)
        pos = end + 1
    return Mapped.join(", ", cells) if cells else Mapped("", offset=line.point(0))


def lines(raw: str, start: int, end: int) -> Iterable[tuple[int, int, int]]:
    """(start, end, next start) of each line of raw[start:end]; the last one may be open
    (next start == end and no break after it)."""
    pos = start
    for brk in LINE_BREAK.finditer(raw, start, end):
        yield pos, brk.start(), brk.end()
        pos = brk.end()
    if pos < end:
        yield pos, end, end


def read_slice(
    raw: str, start: int, end: int, carry: Carry, lang: str, *, inside: bool, origin: int = 0
) -> tuple[list[Piece], Carry]:
    """Normalise raw[start:end], a slice that begins where `carry` says and ends at a block
    boundary (or the end of the text) or, `inside`, inside a line. `origin`: where raw[0]
    is in the text the pieces' maps point into."""
    reader = _Reader(carry)
    for line_start, line_end, following in lines(raw, start, end):
        whole = not inside or following < end or line_end < end
        line = Mapped.of(raw[line_start:line_end], origin + line_start)
        reader.line(clean_line(line), line_end, whole=whole)
    carry = reader.finish(inside)
    return [
        Piece(normalize_piece(text, lang), final, raw_end) for text, final, raw_end in reader.blocks
    ], carry


def read_raw_slice(
    raw: str, start: int, end: int, *, inside: bool, origin: int = 0
) -> list[Piece]:
    """raw[start:end] for a request that asked for no normalisation: one piece per line,
    each a block (`inside`: the last line goes on in the next slice); only control and odd
    space characters go and words are cut at `WORD_CHARS`, so a G2P gets what it can read."""
    pieces = []
    for line_start, line_end, following in lines(raw, start, end):
        whole = not inside or following < end or line_end < end
        line = Mapped.of(raw[line_start:line_end], origin + line_start)
        pieces.append(Piece(_bare(line), whole, line_end))
    return pieces


def _bare(line: Mapped) -> Mapped:
    line = line.sub(_SPACES, " ")
    if not line.text.isascii():
        line = line.keep(_visible)
    elif line.text.translate(_ASCII_CONTROL) != line.text:
        line = line.keep(lambda c: _ASCII_CONTROL.get(ord(c), c))
    text = line.sub(MULTI_SPACE, " ").strip()
    if len(text) > WORD_CHARS:
        text = text.sub(LONG_RUN, lambda m: split_run(m, markup=True))
    return text


def block_state(
    raw: str, lines_: Iterable[tuple[int, int, int]], carry: Carry
) -> Iterable[tuple[int, bool]]:
    """For each whole line: (where the next line starts, whether a block ends there)."""
    reader = _Reader(carry)
    for line_start, line_end, following in lines_:
        line = clean_line(Mapped.of(raw[line_start:line_end], line_start))
        reader.line(line, line_end, whole=True)
        yield following, reader.boundary()
