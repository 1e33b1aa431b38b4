"""A Markdown document read into chapters at its headings.

Headings are ATX (`# Title`, `## Title`, up to three spaces before, an optional closing run of
`#`) and setext (a line of text underlined by `===`, level 1, or `---`, level 2; the heading is
that one line). Lines inside fenced code blocks (``` or ~~~) are not headings. Chapters are cut
at level 1 headings; at level 2 when there are none, or when the only level 1 heading is the
document's first heading and level 2 headings follow (that heading is then the book's title,
and starts the first chapter). Levels 3 and below stay inside their chapter, and so does a
heading without words (`#` alone), though it counts against `max_chapters` like any other.

A leading YAML block (`---` ... `---`) gives the book's `title`, `author` (or `creator`) and
`lang` (or `language`), read as plain `key: value` lines; it is not part of any chapter.

The chapters' text is Markdown as written: speechd's front end reads Markdown.

Every heading, fence and `===`/`---` line is found by one anchored pattern whose parts are
bounded or stop at a line's end (linear on any text); they count against `max_marks` before
any is looked at further, and chapters against `max_chapters`.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ._book import Book
from ._chapters import Heading, cut, decode_text, short
from ._limits import BookLimits, too_large

__all__ = ["read_markdown"]

_MARKS = re.compile(r"^ {0,3}(?:(#{1,6})(?=[ \t]|$)([^\n]*)|(`{3,}|~{3,})|(=+|-+)[ \t]*$)", re.M)
_CLOSING = re.compile(r"(?:^|[ \t]+)#+[ \t]*$")
_NOT_PARAGRAPH = re.compile(r" {0,3}(?:[#>*+-]|[0-9]{1,9}[.)]|```|~~~)|    |\t")
_FRONT = re.compile(r"^(?:---|\.\.\.)[ \t]*$", re.M)
_FRONT_CHARS = 8192
_KEYS = {"title": "title", "author": "author", "creator": "author", "lang": "language",
         "language": "language"}  # fmt: skip


class _Mark(NamedTuple):
    at: int
    level: int
    title: str


def _front_matter(text: str) -> tuple[dict[str, str], int]:
    """The YAML block's keys (title, author, language) and where the text after it starts."""
    if not text.startswith("---\n"):
        return {}, 0
    end = _FRONT.search(text, 4, _FRONT_CHARS)
    if end is None:
        return {}, 0
    found: dict[str, str] = {}
    for line in text[4 : end.start()].split("\n"):
        key, colon, value = line.partition(":")
        key = _KEYS.get(key.strip().lower(), "")
        if colon and key and key not in found:
            found[key] = short(value.strip().strip("\"'"))
    return found, end.end()


def _marks(text: str, limits: BookLimits) -> list[_Mark]:
    marks: list[_Mark] = []
    fence = ""
    previous = -1  # where the line of the last mark starts
    for count, m in enumerate(_MARKS.finditer(text), 1):
        if count > limits.max_marks:
            raise too_large(
                "max_marks",
                f"the document has more than {limits.max_marks:,} heading, rule or fence lines",
            )
        if m.group(3):
            run = m.group(3)
            eol = text.find("\n", m.end())
            rest = text[m.end() : eol if eol >= 0 else len(text)]
            if not fence:
                fence = run
            elif run[0] == fence[0] and len(run) >= len(fence) and not rest.strip():
                fence = ""
        elif fence:
            pass
        elif m.group(1):
            title = _CLOSING.sub("", m.group(2)[: 4 * 200]).strip()
            marks.append(_Mark(m.start(), len(m.group(1)), short(title)))
        else:
            start = m.start()
            above = text.rfind("\n", 0, max(start - 1, 0)) + 1 if start else -1
            line = text[above : start - 1] if start else ""
            if line.strip() and above != previous and not _NOT_PARAGRAPH.match(line):
                level = 1 if m.group(4)[0] == "=" else 2
                marks.append(_Mark(above, level, short(line)))
        previous = m.start()
    return marks


def read_markdown(data: bytes, limits: BookLimits) -> Book:
    text = decode_text(data, limits)
    meta, skip = _front_matter(text)
    first_line = 1 + text.count("\n", 0, skip)
    text = text[skip:]
    marks = [m for m in _marks(text, limits) if m.level <= 2]
    if len(marks) > limits.max_chapters + 1:
        raise too_large("max_chapters", f"it has more than {limits.max_chapters:,} chapters")
    marks = [m for m in marks if m.title]  # a heading without words starts no chapter
    ones = [m for m in marks if m.level == 1]
    twos = [m for m in marks if m.level == 2]
    title = meta.get("title", "")
    if len(ones) == 1 and marks[0] is ones[0] and twos:
        title = title or ones[0].title
        chosen = [ones[0], *twos]
    else:
        chosen = ones or twos
    headings = [Heading(m.at, m.title) for m in chosen]
    return Book(
        kind="markdown",
        title=title,
        author=meta.get("author", ""),
        language=meta.get("language", ""),
        chapters=tuple(cut(text, headings, limits, first_line=first_line)),
    )
