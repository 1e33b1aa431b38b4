"""What a book may be, checked before (or as soon as) reading it costs anything, and the
running counts that reading one book keeps against those limits."""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

from speechd.errors import BookTooLarge
from speechd.limits import MAX_CAST_CHARS

__all__ = ["MIB", "BookLimits", "Budget", "too_large"]

MIB: Final = 1 << 20

_Count = Annotated[int, msgspec.Meta(ge=1)]


class BookLimits(msgspec.Struct, frozen=True, kw_only=True):
    """The bounds of one book. Each field names the limit a `BookTooLarge` reports.

    Checked before any work: `max_bytes` (the upload), `max_members` (zip entries, from the
    archive's end record, before its directory is read; and the package's manifest items),
    `max_member_bytes` and `max_total_bytes` (every member's declared size and their sum, from
    the directory), `max_chapters` (an EPUB's spine; a text document's headings as they are
    found), `max_chars` (a text document's length), `max_xml_bytes` and `max_tags` (all the
    XML read: container, package, navigation and content documents; its tags are its `<`,
    counted before each document is read).

    Checked while reading, at the first byte or character past them: `max_member_bytes` again
    (what a member really inflates to: a declared size is only a claim), `max_depth`
    (elements nested), `max_marks` (a Markdown document's heading, rule and fence lines; the
    entries of an EPUB's table of contents), `max_chapter_chars` and `max_chars` (the text
    made). A cover larger than `max_cover_bytes` is left out rather than refused.
    """

    max_bytes: _Count = 64 * MIB
    max_members: _Count = 5_000
    max_member_bytes: _Count = 16 * MIB
    max_total_bytes: _Count = 256 * MIB
    max_xml_bytes: _Count = 32 * MIB
    max_tags: _Count = 200_000
    max_depth: _Count = 100
    max_marks: _Count = 10_000
    max_chapters: _Count = 1_000
    max_chapter_chars: _Count = MAX_CAST_CHARS
    """A chapter is made as one cast: its text is held to a cast's input limit."""
    max_chars: _Count = 2_000_000
    max_cover_bytes: _Count = 5 * MIB


def too_large(limit: str, message: str) -> BookTooLarge:
    return BookTooLarge(f"The book is too large: {message}.", limit=limit)


class Budget:
    """What one read has used of its limits so far (bytes and tags of XML, characters)."""

    def __init__(self, limits: BookLimits) -> None:
        self.limits = limits
        self.xml_bytes = 0
        self.tags = 0
        self.chars = 0

    def xml(self, name: str, raw: bytes) -> None:
        """Count one XML document, before it is read."""
        self.xml_bytes += len(raw)
        self.tags += raw.count(b"<")
        if self.xml_bytes > self.limits.max_xml_bytes:
            raise too_large(
                "max_xml_bytes",
                f"its XML documents, {name} among them, hold more than "
                f"{self.limits.max_xml_bytes:,} bytes",
            )
        if self.tags > self.limits.max_tags:
            raise too_large(
                "max_tags",
                f"its XML documents, {name} among them, hold more than "
                f"{self.limits.max_tags:,} tags",
            )

    def text(self, where: str, chapter_chars: int, added: int) -> None:
        """Count `added` characters of text; `chapter_chars` is the chapter's length with them."""
        self.chars += added
        if chapter_chars > self.limits.max_chapter_chars:
            raise too_large(
                "max_chapter_chars",
                f"a chapter ({where}) holds more than {self.limits.max_chapter_chars:,} characters",
            )
        if self.chars > self.limits.max_chars:
            raise too_large(
                "max_chars", f"it holds more than {self.limits.max_chars:,} characters of text"
            )
