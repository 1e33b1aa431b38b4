"""Books in the store: a book's id and its private stream `books/<id>`.

A book is an ordered list of chapter casts, each an ordinary cast (its text in its own
`catalog/<cast id>`, its audio in `pub/casts/<cast id>`), made as background work: its jobs
say `background` and name the book (`Job.book`). The book's stream holds what no cast does:

    seq 0   `recipe`   BookRecipe (JSON body): title, author, language, voice, speed, format,
                       created, and every chapter: its title, length, cast id and overrides
    seq 1   `cover`    the cover's bytes (b"" for none; the media type is in the recipe)
    seq 2.. events, each in its headers alone (the body is b""), so the stream is read
            without bodies:
            `select`   `c`: the chapters chosen (JSON list of 0-based indices), at creation
                       and each time the same upload asks for more
            `cancel`   the book stops being made (a `CancelBook` in `jobs` tells the workers)
            `resume`   made again after a cancel (the same upload, posted again)
            `listen`   `c`: a chapter someone opened (its cast got a foreground job, once)
            `frames`   `c`: a finished chapter's frame table (the body: little-endian uint16
                       frame lengths, `speechd.audio.frame_table`), `f` its cast, `t` the
                       layout's etag it was read from and `s` its samples: what an audiobook
                       file is planned from, kept so the file is planned without reading
                       every chapter's audio again

The first three records are appended together with `match_seq_num=0`: a claim, so the first
writer of a book makes it and everybody else finds it. A book's id is a keyed content hash
(`book_id`, the deployment secret's key as `cast_id`'s) of the upload's bytes and of what
changes the audio, so the same upload with the same options is the same book (how a client
resumes) and nobody can confirm someone else's book by computing ids.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from typing import Final

import msgspec

from speechd._compat import StrEnum
from speechd.durable import AppendRecord, Record

from ._records import H_EVENT, encode

__all__ = [
    "H_BOOK_CAST",
    "H_BOOK_CHAPTERS",
    "H_BOOK_ETAG",
    "H_BOOK_SAMPLES",
    "BookChapter",
    "BookEvent",
    "BookRecipe",
    "CancelBook",
    "book_event",
    "book_id",
    "chapters_of",
    "frames_record",
    "is_book_id",
    "recipe_records",
]

H_BOOK_CHAPTERS: Final = b"c"
H_BOOK_CAST: Final = b"f"
H_BOOK_ETAG: Final = b"t"
H_BOOK_SAMPLES: Final = b"s"

_ID_BYTES: Final = 16
_ID_CHARS: Final = 22


class BookEvent(StrEnum):
    RECIPE = "recipe"
    COVER = "cover"
    SELECT = "select"
    CANCEL = "cancel"
    RESUME = "resume"
    LISTEN = "listen"
    FRAMES = "frames"


class BookChapter(msgspec.Struct, frozen=True, omit_defaults=True):
    """One chapter of a book: its title, its text's length, the cast that speaks it, and
    the voice and speed it overrides the book's with ("" and 0: the book's)."""

    title: str
    chars: int
    cast: str
    voice: str = ""
    speed: float = 0.0


class BookRecipe(msgspec.Struct, frozen=True):
    """What a book is (`books/<id>` seq 0). `voice` is the voice spec its chapters are made
    with, `format` the book's file (`m4b` or `mp3`; its chapters are made in `aac` or `mp3`),
    `kind` what the upload was read as (`epub`, `markdown`, `text`)."""

    kind: str
    title: str
    author: str
    language: str
    voice: str
    speed: float
    format: str
    created_ms: int
    chapters: list[BookChapter]
    cover_type: str = ""
    alt_text: bool = False


class CancelBook(msgspec.Struct, frozen=True):
    """In `jobs`: the background jobs of book `cancel_book` appended before this record are
    skipped, and its chapters being made in the background stop after their current chunk
    (nothing is written into them: a chapter's cast may be someone else's too). Not a job:
    readers of `jobs` that decode a `Job` skip it."""

    cancel_book: str


def book_id(
    secret: bytes,
    *,
    upload: bytes,
    kind: str,
    voice: str,
    speed: float,
    format: str,
    alt_text: bool,
    overrides: Mapping[int, tuple[str, float]],
    scope: str = "",
) -> str:
    """The id of the book these make (22 url-safe characters): the upload's bytes, how it is
    read (`kind`, `alt_text`), and what changes its audio (voice spec, speed, format, each
    chapter's voice and speed overrides by 0-based index); `scope` as `cast_id`'s. Which
    chapters are chosen is not in it: choosing more is the same book."""
    digest = hashlib.blake2b(upload, digest_size=32).digest()
    fields: list[object] = [
        "book",
        digest,
        kind,
        voice,
        round(float(speed), 3),
        format,
        alt_text,
        sorted((n, v, round(float(s), 3)) for n, (v, s) in overrides.items()),
    ]
    if scope:
        fields.append(scope)
    material = msgspec.msgpack.encode(fields)
    key = hashlib.blake2b(material, key=secret[:64], digest_size=_ID_BYTES).digest()
    return base64.urlsafe_b64encode(key).rstrip(b"=").decode()


def is_book_id(value: str) -> bool:
    """Whether `value` has the shape of a book id (checked before a stream is named)."""
    if len(value) != _ID_CHARS:
        return False
    return all(c.isascii() and (c.isalnum() or c in "-_") for c in value)


def book_event(event: BookEvent, chapters: list[int] | None = None) -> AppendRecord:
    """An event record of a book's stream (its facts in headers, no body)."""
    headers: list[tuple[bytes, bytes]] = [(H_EVENT, event.value.encode())]
    if chapters is not None:
        headers.append((H_BOOK_CHAPTERS, msgspec.json.encode(chapters)))
    return AppendRecord(b"", tuple(headers))


def recipe_records(recipe: BookRecipe, cover: bytes, chosen: list[int]) -> list[AppendRecord]:
    """A new book's first records: recipe, cover, the chapters chosen."""
    return [
        AppendRecord(encode(recipe), ((H_EVENT, BookEvent.RECIPE.value.encode()),)),
        AppendRecord(cover, ((H_EVENT, BookEvent.COVER.value.encode()),)),
        book_event(BookEvent.SELECT, chosen),
    ]


def frames_record(chapter: int, cast: str, etag: str, samples: int, table: bytes) -> AppendRecord:
    """A finished chapter's frame table, kept (see the module docstring)."""
    headers = (
        (H_EVENT, BookEvent.FRAMES.value.encode()),
        (H_BOOK_CHAPTERS, msgspec.json.encode([chapter])),
        (H_BOOK_CAST, cast.encode()),
        (H_BOOK_ETAG, etag.encode()),
        (H_BOOK_SAMPLES, str(samples).encode()),
    )
    return AppendRecord(table, headers)


def chapters_of(record: Record) -> list[int]:
    """The chapter indices an event names (`c`); [] when it names none or they do not parse."""
    raw = record.header(H_BOOK_CHAPTERS)
    if not raw:
        return []
    try:
        found = msgspec.json.decode(raw, type=list[int])
    except msgspec.DecodeError:
        return []
    return found
