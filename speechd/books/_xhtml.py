"""The words of an XHTML content document, as paragraphs a listener should hear.

Kept: the text of the body, each block (paragraph, heading, list item, quote, figure caption,
table row, ...) a paragraph of its own, a `<br/>` a line break inside one, `<pre>` as written
(its lines kept). A table is read row by row, each row a paragraph whose cells are read in
order, joined by commas. Headings are kept, and the first one is remembered (a chapter's title
when the navigation gives none).

Left out, with everything inside them: `head`, `script`, `style`, `template`, `noscript`,
forms, media fallbacks, MathML and SVG, ruby annotations (`rt`, `rp`), `nav`, elements marked
`hidden` or `aria-hidden="true"`; footnote references and back-links (`epub:type` noteref,
backlink; `role` doc-noteref, doc-backlink), page numbers (`epub:type` pagebreak, `role`
doc-pagebreak, and the `pagenum` classes of Project Gutenberg and converters), and a link
into a note whose whole text is a marker (`1`, `[2]`, `*`, `†`, `↩`). Images are read by
their `alt` text only when `alt_text` is asked for.

`splits` (an element id -> a chapter title, from the navigation) starts a new `Part` at
that element, so a document that holds several chapters gives one part per chapter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

from ._limits import Budget
from ._markup import read_xml

__all__ = ["Part", "extract"]

# fmt: off
_SKIP: Final = frozenset({
    "head", "script", "style", "template", "noscript", "rt", "rp", "svg", "math", "object",
    "embed", "iframe", "audio", "video", "canvas", "button", "input", "select", "textarea",
    "nav",
})
_SKIP_TYPES: Final = frozenset({"noteref", "backlink", "pagebreak", "page-list", "toc"})
_SKIP_ROLES: Final = frozenset({"doc-noteref", "doc-backlink", "doc-pagebreak", "doc-pagelist"})
_SKIP_CLASSES: Final = frozenset({"pagenum", "pagenumber", "page-number", "pageno"})
_BLOCKS: Final = frozenset({
    "body", "p", "div", "h1", "h2", "h3", "h4", "h5", "h6", "li", "ul", "ol", "dl", "dt", "dd",
    "blockquote", "section", "article", "header", "footer", "aside", "figure", "figcaption",
    "table", "caption", "thead", "tbody", "tfoot", "tr", "pre", "hr", "address", "main",
    "details", "summary", "center",
})
# fmt: on
_HEADINGS: Final = frozenset(["h1", "h2", "h3", "h4", "h5", "h6"])
_CELLS: Final = frozenset({"td", "th"})
_MARKER = re.compile(r"\s*[\[(]?(?:[0-9]{1,3}|[*†‡§¶]{1,3}|[↩↑^⏎]\ufe0e?)[\])]?\s*")
_SPACES = re.compile(r"[^\S\n]+")
_LINES = re.compile(r" ?\n[\s]*")
_SKIPPED, _BLOCK, _HEADING, _CELL, _ROW, _PRE, _NOTE_LINK = 1, 2, 4, 8, 16, 32, 64


def _collapse(text: str) -> str:
    """Runs of spaces as one space, a run of line breaks as one, the ends trimmed."""
    return _LINES.sub("\n", _SPACES.sub(" ", text)).strip()


@dataclass
class Part:
    """The text of one document, or of one chapter of it (from an id the navigation names)."""

    title: str | None
    fragment: str = ""
    heading: str = ""
    paragraphs: list[str] = field(default_factory=list)
    chars: int = 0


def _tokens(value: str | None) -> set[str]:
    return set(value.split()) if value else set()


def _name_flags(name: str) -> int:
    """What an element is by its name alone."""
    if name in _SKIP:
        return _SKIPPED
    flags = _CELL if name in _CELLS else _ROW | _BLOCK if name == "tr" else 0
    if name in _BLOCKS:
        flags |= _BLOCK
    if name in _HEADINGS:
        flags |= _HEADING
    if name == "pre":
        flags |= _PRE
    return flags


_KNOWN: Final = {name: _name_flags(name) for name in (*_SKIP, *_BLOCKS, *_CELLS)}


def _flags(name: str, attrs: dict[str, str]) -> int:
    """What an element is: by its name, then by its attributes (its semantics, `hidden`)."""
    flags = _KNOWN.get(name)
    if flags is None:
        flags = _name_flags(name)
    if not attrs or flags & _SKIPPED:
        return flags
    types: set[str] = set()
    for key, value in attrs.items():
        if key.endswith(":type"):
            types |= _tokens(value)
    if (
        "hidden" in attrs
        or attrs.get("aria-hidden") == "true"
        or types & _SKIP_TYPES
        or _tokens(attrs.get("role")) & _SKIP_ROLES
        or _tokens(attrs.get("class")) & _SKIP_CLASSES
    ):
        return _SKIPPED
    if name == "a" and "#" in attrs.get("href", ""):
        flags |= _NOTE_LINK
    return flags


class _Extract:
    def __init__(
        self, where: str, title: str | None, splits: dict[str, str], alt_text: bool,
        budget: Budget,
    ) -> None:  # fmt: skip
        self._where = where
        self._splits = splits
        self._alt_text = alt_text
        self._budget = budget
        self.parts = [Part(title)]
        self._flags: list[int] = []
        self._skip = 0
        self._pre = 0
        self._cells = 0
        self._row_cells = 0
        self._para: list[str] = []
        self._links: list[int] = []  # where each open note link's text begins in _para

    def start(self, name: str, attrs: dict[str, str]) -> None:
        if self._skip:
            self._flags.append(_SKIPPED)
            self._skip += 1
            return
        ident = attrs.get("id")
        if ident is not None and ident in self._splits:
            self._flush()
            self.parts.append(Part(self._splits.pop(ident), fragment=ident))
        flags = _flags(name, attrs)
        self._flags.append(flags)
        if flags & _SKIPPED:
            self._skip += 1
            return
        if flags & _BLOCK and not self._cells:
            self._flush()
        if flags & _ROW:
            self._row_cells = 0
        if flags & _CELL:
            if self._cells == 0 and self._row_cells:
                self._para.append(" " if self._last_char() in ".,;:!?" else ", ")
            self._cells += 1
            self._row_cells += 1
        elif flags & _BLOCK and self._cells:
            self._para.append(" ")
        self._pre += bool(flags & _PRE)
        if flags & _NOTE_LINK:
            self._links.append(len(self._para))
        if name == "br":
            self._para.append("\n")
        elif name == "img" and self._alt_text and attrs.get("alt", "").strip():
            self._para.append(f" {attrs['alt'].strip()} ")

    def end(self, name: str) -> None:
        flags = self._flags.pop()
        if flags & _SKIPPED:
            self._skip -= 1
            return
        if flags & _NOTE_LINK:
            mark = self._links.pop()
            # A marker is a piece or two of text (`1`, `<sup>1</sup>`): longer links are words.
            if len(self._para) - mark <= 4 and _MARKER.fullmatch("".join(self._para[mark:])):
                del self._para[mark:]
        self._pre -= bool(flags & _PRE)
        if flags & _CELL:
            self._cells -= 1
        elif flags & _BLOCK and not self._cells:
            self._flush(heading=bool(flags & _HEADING))

    def _last_char(self) -> str:
        """The paragraph's last character but spaces ("" for none)."""
        for piece in reversed(self._para):
            if piece.strip():
                return piece.rstrip()[-1]
        return ""

    def text(self, text: str) -> None:
        if not self._skip:
            self._para.append(text if self._pre else text.replace("\n", " "))

    def _flush(self, *, heading: bool = False) -> None:
        if not self._para:
            return
        text = _collapse("".join(self._para).replace("\u00ad", ""))
        self._para.clear()
        self._links = [0] * len(self._links)  # an open link's text so far is out
        if not text:
            return
        part = self.parts[-1]
        if heading and not part.heading:
            part.heading = text.replace("\n", " ")
        added = len(text) + (2 if part.paragraphs else 0)
        part.paragraphs.append(text)
        part.chars += added
        self._budget.text(self._where, part.chars, added)

    def finish(self) -> list[Part]:
        self._flush()
        return self.parts


def extract(
    raw: bytes,
    where: str,
    *,
    title: str | None,
    splits: dict[str, str],
    alt_text: bool,
    budget: Budget,
) -> list[Part]:
    """The parts of one content document: the first titled `title`, one more per element of
    `splits` found (in document order), each with the paragraphs from there on."""
    reader = _Extract(where, title, dict(splits), alt_text, budget)
    read_xml(raw, where, reader, budget)
    return reader.finish()
