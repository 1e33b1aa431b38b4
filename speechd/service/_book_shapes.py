"""What a book request is, what a book's status says, and the checks of them that read
nothing of the store (the service's `_books` does the rest)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from speechd.books import Book, BookLimits
from speechd.casts import schema
from speechd.durable import Record
from speechd.errors import InvalidRequest
from speechd.text import check_input

from ._requests import CheckedRequest, check_text

__all__ = [
    "BookChapterStatus",
    "BookRequest",
    "BookStatus",
    "ChapterVoice",
    "check_chapters",
    "check_overridden",
    "chosen_indices",
    "is_cancelled",
]


class BookRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A book someone asked for, shaped by its route."""

    data: bytes
    kind: str
    """How to read `data`: `epub`, `markdown` or `text` (`speechd.books.read_book`)."""
    voice: str | None = None
    speed: float = 1.0
    format: str = "m4b"
    chapters: list[int] | None = None
    """The chapters to make, numbered from 1 in reading order; None: all."""
    alt_text: bool = False
    scope: str = ""
    """Who shares the book and its chapters (as `CastRequest.scope`)."""
    chapter_voices: dict[int, str] = msgspec.field(default_factory=dict)
    """Chapter (from 1) -> the voice it is read in instead of `voice`."""
    chapter_speeds: dict[int, float] = msgspec.field(default_factory=dict)
    """Chapter (from 1) -> its speed instead of `speed`."""


class ChapterVoice(msgspec.Struct, frozen=True):
    """How one chapter is read: its voice spec, that voice's language and its speed."""

    voice: str
    lang: str
    speed: float


class BookChapterStatus(msgspec.Struct, frozen=True):
    number: int
    title: str
    chars: int
    cast: str
    chosen: bool
    state: str
    """A chosen chapter's cast's state (`queued`, `generating`, `done`, `failed`); a chapter
    not chosen, or a cancelled book's chapter not done: `not_made`."""
    audio_ms: int = 0
    voice: str = ""
    """The voice spec the chapter is read in (the book's, or its own)."""
    speed: float = 1.0


class BookStatus(msgspec.Struct, frozen=True):
    """Where a book stands. `state`: `queued` (no chosen chapter started), `generating`,
    `done` (every chosen chapter), `failed` (a chosen chapter failed: posting the book again
    makes it again), `cancelled`. `progress` is the part of the chosen chapters' text made
    (0..1); `eta_s` the seconds its rest should take at the workers' measured speed with the
    device to itself (None when not measured yet, or nothing is left)."""

    id: str
    state: str
    kind: str
    title: str
    author: str
    language: str
    voice: str
    speed: float
    format: str
    created_ms: int
    progress: float
    eta_s: float | None
    chapters: list[BookChapterStatus]
    has_cover: bool = False
    created: bool = False
    """True when the request that returned this status created the book."""


def chosen_indices(numbers: list[int] | None, count: int) -> list[int]:
    """The 0-based indices of chapters `numbers` (from 1; None: all) of a book of `count`."""
    if numbers is None:
        return list(range(count))
    if not numbers:
        raise InvalidRequest("Choose at least one chapter.", param="chapters")
    bad = [n for n in numbers if not 1 <= n <= count]
    if bad:
        raise InvalidRequest(
            f"The book has chapters 1 to {count}; there is no chapter {bad[0]}.",
            param="chapters",
        )
    return sorted({n - 1 for n in numbers})


def is_cancelled(events: list[Record]) -> bool:
    """Whether the book's last cancel comes after its last resume."""
    cancel, resume = schema.BookEvent.CANCEL.value.encode(), schema.BookEvent.RESUME.value.encode()
    state = False
    for event in events:
        kind = event.header(schema.H_EVENT)
        if kind == cancel:
            state = True
        elif kind == resume:
            state = False
    return state


def check_overridden(numbers: Iterable[int], count: int, param: str) -> None:
    """InvalidRequest unless each chapter an override names (from 1) is one of `count`."""
    bad = sorted(n for n in numbers if not 1 <= n <= count)
    if bad:
        raise InvalidRequest(
            f"{param}: the book has chapters 1 to {count}; there is no chapter {bad[0]}.",
            param=param,
        )


def check_chapters(
    book: Book, voices: Sequence[ChapterVoice], fmt: str, limits: BookLimits
) -> list[CheckedRequest]:
    """Each chapter's text checked as a cast's, read as `voices` says for it (on a thread: a
    book's text is long)."""
    checked: list[CheckedRequest] = []
    for n, (chapter, how) in enumerate(zip(book.chapters, voices, strict=True), start=1):
        text = check_text(chapter.text, max_chars=limits.max_chapter_chars, param="file")
        try:
            check_input(text, lang=how.lang, ssml=False, speed=how.speed)
        except InvalidRequest as exc:
            raise InvalidRequest(f"Chapter {n}: {exc.message}", param="file") from exc
        checked.append(CheckedRequest(text, how.voice, how.speed, fmt, "text", True))
    return checked
