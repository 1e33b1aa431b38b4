"""Text that remembers where each of its characters came from.

The front end rewrites what users send (entities decoded, Markdown stripped, `2024-01-15`
read as `January 15th 2024`, an SSML `sub` replaced by its alias), and every word it speaks
must still point at the characters of the input it came from (`source: [begin, end)` on
timed words). `Mapped` is a string plus, per character, the [begin, end) of the source it
stands for, and the few string operations the normaliser uses, each carrying the map along:

* a character copied stays mapped to its own source;
* text a rule writes in place of a match maps to the whole match's source (the three words
  spoken for `2024-01-15` all point at `2024-01-15`); a rule that keeps a group of its
  match (a link's text, an emphasised word) says so, and the kept characters keep their own
  source;
* text inserted where nothing was (a joining space, a closing `.`) maps to an empty span
  at the point where it was inserted.

Maps are materialised lazily: text that is a plain slice of its source (the usual line of
prose) is an offset and a length until a rule changes it, so mapping costs nothing where
nothing is rewritten. Every operation is linear in the text it returns.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable, Iterable, Sequence
from typing import Union

__all__ = ["Mapped", "Part", "Repl"]

#: What a rule may put in place of a match: new text (mapped to the whole match), a span of
#: the text being rewritten (copied with its own map), or text already mapped.
Part = Union[str, tuple[int, int], "Mapped"]
Repl = Callable[[re.Match[str]], Union[str, "Mapped", Sequence[Part]]]


def _run(begin: int, n: int) -> tuple[array, array]:
    return array("q", range(begin, begin + n)), array("q", range(begin + 1, begin + n + 1))


class Mapped:
    """A string and, per character, the [begin, end) of the source it came from."""

    __slots__ = ("_begins", "_ends", "_offset", "text")

    def __init__(
        self, text: str, begins: array | None = None, ends: array | None = None, offset: int = 0
    ) -> None:
        self.text = text
        # None: the identity map, character i is source [offset + i, offset + i + 1).
        self._begins = begins
        self._ends = ends
        self._offset = offset

    # ------------------------------------------------------------------ building

    @classmethod
    def of(cls, text: str, offset: int = 0) -> Mapped:
        """`text`, found at `offset` in the source."""
        return cls(text, offset=offset)

    @classmethod
    def new(cls, text: str, begin: int, end: int) -> Mapped:
        """`text` written in place of source [begin, end): every character maps to it."""
        n = len(text)
        return cls(text, array("q", [begin]) * n, array("q", [end]) * n)

    def at(self, text: str, a: int, b: int) -> Mapped:
        """`text` written in place of this text's [a, b): mapped to that part's source."""
        return Mapped.new(text, *self.source(a, b))

    def _maps(self) -> tuple[array, array]:
        if self._begins is None or self._ends is None:
            return _run(self._offset, len(self.text))
        return self._begins, self._ends

    # ------------------------------------------------------------------ reading

    def __len__(self) -> int:
        return len(self.text)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Mapped({self.text!r})"

    def begin(self, i: int) -> int:
        """Where the source of character i begins."""
        return self._offset + i if self._begins is None else self._begins[i]

    def end(self, i: int) -> int:
        """Where the source of character i ends."""
        return self._offset + i + 1 if self._ends is None else self._ends[i]

    def point(self, i: int) -> int:
        """The source offset at the gap before character i (after the last one: its end)."""
        if i < len(self.text):
            return self.begin(i)
        return self.end(len(self.text) - 1) if self.text else self._offset

    def source(self, a: int, b: int) -> tuple[int, int]:
        """The source [begin, end) of text[a:b] (an empty slice: the point at a)."""
        if b <= a:
            at = self.point(a)
            return at, at
        return self.begin(a), self.end(b - 1)

    # ------------------------------------------------------------------ slicing, joining

    def __getitem__(self, key: slice) -> Mapped:
        a, b, step = key.indices(len(self.text))
        if step != 1:
            raise ValueError("Mapped slices take no step")
        b = max(a, b)
        if self._begins is None:
            return Mapped(self.text[a:b], offset=self._offset + a)
        assert self._ends is not None
        return Mapped(self.text[a:b], self._begins[a:b], self._ends[a:b])

    def strip(self, chars: str | None = None) -> Mapped:
        text = self.text
        a = len(text) - len(text.lstrip(chars))
        b = len(text.rstrip(chars))
        return self if a == 0 and b == len(text) else self[a : max(a, b)]

    def lstrip(self, chars: str | None = None) -> Mapped:
        a = len(self.text) - len(self.text.lstrip(chars))
        return self[a:] if a else self

    def rstrip(self, chars: str | None = None) -> Mapped:
        b = len(self.text.rstrip(chars))
        return self[:b] if b < len(self.text) else self

    def __add__(self, other: Mapped | str) -> Mapped:
        return Mapped.concat([self, other])

    @staticmethod
    def concat(parts: Iterable[Mapped | str]) -> Mapped:
        """The parts end to end; a plain `str` part is inserted text (an empty span where it
        goes)."""
        texts: list[str] = []
        begins = array("q")
        ends = array("q")
        last = 0  # the source point after what is built so far
        for part in parts:
            if isinstance(part, str):
                if part:
                    texts.append(part)
                    begins.extend(array("q", [last]) * len(part))
                    ends.extend(array("q", [last]) * len(part))
                continue
            if not part.text:
                continue
            b, e = part._maps()
            texts.append(part.text)
            begins.extend(b)
            ends.extend(e)
            last = e[-1]
        return Mapped("".join(texts), begins, ends)

    @staticmethod
    def join(sep: str, items: Sequence[Mapped]) -> Mapped:
        """`sep.join(items)`, each `sep` mapped to the gap it fills."""
        if len(items) == 1:
            return items[0]
        parts: list[Mapped | str] = []
        for i, item in enumerate(items):
            if i:
                parts.append(sep)
            parts.append(item)
        return Mapped.concat(parts)

    # ------------------------------------------------------------------ rewriting

    def sub(self, pattern: re.Pattern[str], repl: Repl | str, count: int = 0) -> Mapped:
        """`pattern.sub(repl, text)`, mapped. `repl` is a string (new text), or a function of
        the match returning a string, a `Mapped`, or a list of parts: strings (new text),
        `(start, end)` spans of this text (kept, with their own map) and `Mapped`s."""
        text = self.text
        changes: list[tuple[int, int, str | Mapped | Sequence[Part]]] = []
        for m in pattern.finditer(text):
            a, b = m.span()
            out = repl if isinstance(repl, str) else repl(m)
            if isinstance(out, str) and out == text[a:b]:
                continue  # unchanged: keep the characters' own map
            changes.append((a, b, out))
            if count and len(changes) >= count:
                break
        if not changes:
            return self
        # Built on arrays, not pieces: a hostile line may hold thousands of matches.
        begins, ends = self._maps()
        out_text: list[str] = []
        out_begins = array("q")
        out_ends = array("q")
        pos = 0
        for a, b, out in changes:
            if a > pos:
                out_text.append(text[pos:a])
                out_begins += begins[pos:a]
                out_ends += ends[pos:a]
            begin, end = self.source(a, b)
            for part in (out,) if isinstance(out, (str, Mapped)) else out:
                if isinstance(part, str):
                    if part:
                        out_text.append(part)
                        out_begins += array("q", [begin]) * len(part)
                        out_ends += array("q", [end]) * len(part)
                elif isinstance(part, Mapped):
                    if part.text:
                        out_text.append(part.text)
                        part_begins, part_ends = part._maps()
                        out_begins += part_begins
                        out_ends += part_ends
                elif part[1] > part[0]:
                    out_text.append(text[part[0] : part[1]])
                    out_begins += begins[part[0] : part[1]]
                    out_ends += ends[part[0] : part[1]]
            pos = b
        if pos < len(text):
            out_text.append(text[pos:])
            out_begins += begins[pos:]
            out_ends += ends[pos:]
        return Mapped("".join(out_text), out_begins, out_ends)

    def keep(self, wanted: Callable[[str], str | None]) -> Mapped:
        """Each character replaced by `wanted(c)`: itself, another (mapped to it), "" or None
        (dropped). Per character: for lines that need it (control characters, marks)."""
        text = self.text
        changes = [(i, out) for i, c in enumerate(text) if (out := wanted(c)) != c]
        if not changes:
            return self
        begins, ends = self._maps()
        out_text: list[str] = []
        out_begins = array("q")
        out_ends = array("q")
        pos = 0
        for i, out in changes:
            if i > pos:
                out_text.append(text[pos:i])
                out_begins += begins[pos:i]
                out_ends += ends[pos:i]
            if out:
                out_text.append(out)
                out_begins += array("q", [begins[i]]) * len(out)
                out_ends += array("q", [ends[i]]) * len(out)
            pos = i + 1
        if pos < len(text):
            out_text.append(text[pos:])
            out_begins += begins[pos:]
            out_ends += ends[pos:]
        if not out_text:
            return Mapped("", offset=self.point(0))
        return Mapped("".join(out_text), out_begins, out_ends)

    def words(self) -> list[tuple[int, int]]:
        """[start, end) of each run of non-space characters (spaces: " " only)."""
        out = []
        pos = 0
        text = self.text
        for part in text.split(" "):
            if part:
                out.append((pos, pos + len(part)))
            pos += len(part) + 1
        return out
