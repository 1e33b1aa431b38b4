"""A book as speechd reads it: its metadata and its chapters, in order, as text."""

from __future__ import annotations

from typing import Final

import msgspec

__all__ = ["KINDS", "Book", "Chapter"]

KINDS: Final = ("epub", "markdown", "text")
"""The kinds of document a book can be read from."""


class Chapter(msgspec.Struct, frozen=True):
    """One chapter: its title, and its text as the planner reads it (paragraphs separated by a
    blank line, headings kept as paragraphs of their own).

    `href` is where it starts in its source: an EPUB's document (its path in the archive, with
    `#id` when the chapter starts at an element inside it); "" for a text document. `id` is the
    EPUB manifest item's id, or `line-N` (the 1-based line of its heading) in a text document.
    """

    title: str
    text: str
    href: str = ""
    id: str = ""


class Book(msgspec.Struct, frozen=True):
    """A book read by `read_book`: at least one chapter, none of them empty.

    `title`, `author` and `language` are "" where the document does not say them (`language`
    as the document writes it: an EPUB's `dc:language`, a BCP 47 tag such as "en-GB"). `cover`
    is the cover image's bytes and `cover_type` its media type ("image/jpeg"), or both empty.
    """

    kind: str
    title: str
    author: str
    language: str
    chapters: tuple[Chapter, ...]
    cover: bytes = b""
    cover_type: str = ""
