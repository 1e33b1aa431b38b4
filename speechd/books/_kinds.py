"""`read_book`: a document of a declared kind, read into a `Book` within limits."""

from __future__ import annotations

from speechd.errors import BadBook

from ._book import KINDS, Book
from ._epub import read_epub
from ._limits import BookLimits, too_large
from ._markdown import read_markdown
from ._plain import read_plain

__all__ = ["read_book"]

_DEFAULT = BookLimits()


def read_book(
    data: bytes, kind: str, *, limits: BookLimits = _DEFAULT, alt_text: bool = False
) -> Book:
    """Read `data` as a book of `kind` ("epub", "markdown" or "text").

    BookTooLarge (naming the limit) for a book over `limits`, BadBook for one that cannot be
    read; both are speechd errors a caller sees as a 400. `alt_text` reads images by their
    alt text (EPUB). Pure CPU work bounded by `limits`, no I/O: run it off an event loop.
    """
    if kind not in KINDS:
        raise BadBook(f"Unknown kind of book {kind[:40]!r}; use one of: {', '.join(KINDS)}.")
    if len(data) > limits.max_bytes:
        raise too_large("max_bytes", f"{len(data):,} bytes, more than {limits.max_bytes:,}")
    if kind == "epub":
        return read_epub(data, limits, alt_text=alt_text)
    if kind == "markdown":
        return read_markdown(data, limits)
    return read_plain(data, limits)
