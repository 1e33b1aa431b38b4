"""What Markdown and plain-text books share: their bytes as text, and the text cut into chapters
at the headings a reader found."""

from __future__ import annotations

import codecs
import re
from typing import NamedTuple

from speechd.errors import BadBook

from ._book import Chapter
from ._limits import BookLimits, too_large

__all__ = ["Heading", "cut", "decode_text", "has_words", "short"]

_TITLE_CHARS = 200
_WORD = re.compile(r"[^\W_]")


class Heading(NamedTuple):
    """A chapter's heading: where its first line starts in the text, and its title."""

    at: int
    title: str


def has_words(text: str) -> bool:
    """Whether `text` has a letter or digit: something to say."""
    return _WORD.search(text) is not None


def short(title: str) -> str:
    """A title on one line, at most 200 characters."""
    title = " ".join(title[: 4 * _TITLE_CHARS].split())
    return title if len(title) <= _TITLE_CHARS else title[: _TITLE_CHARS - 1].rstrip() + "…"


def decode_text(data: bytes, limits: BookLimits) -> str:
    """The document's text (UTF-8, or UTF-16 with a byte order mark), lines ending in "\\n";
    refused over `max_chars` before it is read further."""
    codec = "utf-16" if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) else "utf-8-sig"
    try:
        text = data.decode(codec)
    except UnicodeDecodeError as exc:
        raise BadBook(
            "The document is not UTF-8 text (nor UTF-16 with a byte order mark)."
        ) from exc
    if len(text) > limits.max_chars:
        raise too_large(
            "max_chars", f"the document holds more than {limits.max_chars:,} characters"
        )
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


def cut(
    text: str, headings: list[Heading], limits: BookLimits, *, first_line: int = 1
) -> list[Chapter]:
    """The chapters `headings` (in order) start, and the text before the first one if it has
    any (titled by its first line). A chapter's text runs from its heading to the next; one
    with no letter or digit in it is left out. `first_line` is the number of the text's first
    line in the document."""
    starts = headings if headings and headings[0].at == 0 else [Heading(0, ""), *headings]
    chapters: list[Chapter] = []
    line, counted = first_line, 0
    for i, heading in enumerate(starts):
        end = starts[i + 1].at if i + 1 < len(starts) else len(text)
        line += text.count("\n", counted, heading.at)
        counted = heading.at
        body = text[heading.at : end].strip()
        if not has_words(body):
            continue
        if len(body) > limits.max_chapter_chars:
            raise too_large(
                "max_chapter_chars",
                f"a chapter (line {line}) holds more than {limits.max_chapter_chars:,} characters",
            )
        title = heading.title or short(body.partition("\n")[0])
        chapters.append(Chapter(title, body, id=f"line-{line}"))
        if len(chapters) > limits.max_chapters:
            raise too_large("max_chapters", f"it has more than {limits.max_chapters:,} chapters")
    if not chapters:
        raise BadBook("The document holds no text to read.")
    return chapters
