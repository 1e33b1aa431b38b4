"""A plain-text document read into chapters at the lines that look like chapter headings.

The rule: a line that stands alone (the document's start or a blank line before it; a blank
line or the document's end after it) and that, after up to 8 spaces, begins with

* `Chapter`, `Part`, `Book`, `Volume` or `Act`, then a number: digits (`Chapter 3`), a roman
  numeral (`CHAPTER III`) or an English number word (`Chapter Twenty-One`); or
* `Prologue`, `Epilogue`, `Preface`, `Foreword`, `Introduction`, `Afterword` or `Interlude`,

in any case, and is at most about 80 characters more (`Chapter 3: The Storm`). One more line
of at most 80 characters right under it (no blank line between) is the chapter's name, as in
many Project Gutenberg texts (`CHAPTER I.` / `THE BEGINNING`), and joins the title. So
"Part of the reason..." is not a heading (no number), nor is a chapter line inside a paragraph.
Text before the first heading is a chapter of its own, titled by its first line; a document
without headings is one chapter.

One pattern finds the headings, anchored at a blank line, its quantifiers bounded (linear on
any text); chapters count against `max_chapters` as they are found.
"""

from __future__ import annotations

import re

from ._book import Book
from ._chapters import Heading, cut, decode_text, short
from ._limits import BookLimits, too_large

__all__ = ["read_plain"]

# fmt: off
_NUMBER_WORDS = [
    "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
    "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
    "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety", "hundred",
]
# fmt: on
_HEADING = re.compile(
    r"(?:\A|\n[ \t]*\n)[ \t]{0,8}(?P<line>(?:(?:chapter|part|book|volume|act)[ \t]{1,8}"
    r"(?:[0-9]{1,4}|[ivxlcdm]{1,9}|" + "|".join(_NUMBER_WORDS) + r")|prologue|epilogue|preface"
    r"|foreword|introduction|afterword|interlude)\b[^\n]{0,80})(?:\n(?P<name>[^\n]{1,80}))?"
    r"(?=\n[ \t]*\n|[ \t\n]*\Z)",
    re.IGNORECASE,
)


def _title(line: str, name: str | None) -> str:
    line = line.strip()
    if not name or not name.strip():
        return short(line)
    return short(f"{line} {name.strip()}" if line[-1:] in ".:;—-" else f"{line}: {name.strip()}")


def read_plain(data: bytes, limits: BookLimits) -> Book:
    text = decode_text(data, limits)
    headings: list[Heading] = []
    for m in _HEADING.finditer(text):
        headings.append(Heading(m.start("line"), _title(m["line"], m["name"])))
        if len(headings) > limits.max_chapters + 1:
            raise too_large("max_chapters", f"it has more than {limits.max_chapters:,} chapters")
    return Book(
        kind="text", title="", author="", language="", chapters=tuple(cut(text, headings, limits))
    )
