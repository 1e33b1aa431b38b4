"""A book's audiobook file: planned from its chapters' frame tables (`speechd.audio.
plan_audiobook`), then streamed from the chapters' casts' records.

A chapter's frame table is counted from its cast's records once, a piece at a time (each
record holds whole frames: its file is never held whole), then kept in the book's stream as a
`frames` record (`schema.frames_record`) with the cast's layout etag and its length in
samples (its eos's), so a later download plans the file without reading any audio first.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Final, NamedTuple

from speechd import casts
from speechd.audio import (
    SAMPLE_RATE,
    AudiobookChapter,
    AudiobookPlan,
    frame_table,
    plan_audiobook,
)
from speechd.casts import schema
from speechd.durable import Record, Store
from speechd.errors import BookNotReady

from ._reader import CastReader
from ._trouble import store_trouble

__all__ = ["BOOK_FORMATS", "BookFile", "BookFiles", "chosen_of"]

BOOK_FORMATS: Final = {"m4b": "aac", "mp3": "mp3"}
"""A book's file formats, each with the format its chapters are made in."""

_TABLE_BATCH = 1 << 20  # bytes of a chapter's audio counted at once


class BookFile(NamedTuple):
    """A book's file, planned (`plan.size` bytes, `plan.media_type`), with each chapter's cast
    and the layout of its file, and its strong `etag` (the same bytes, the same etag)."""

    plan: AudiobookPlan
    chapters: list[tuple[str, casts.CastFile]]
    etag: str


def chosen_of(events: list[Record]) -> set[int]:
    """The chapters (0-based) a book's events chose."""
    select = schema.BookEvent.SELECT.value.encode()
    return {n for e in events if e.header(schema.H_EVENT) == select for n in schema.chapters_of(e)}


class BookFiles:
    """Plans and streams books' files over one store."""

    def __init__(self, store: Store, reader: CastReader) -> None:
        self._store = store
        self._reader = reader

    async def plan(
        self,
        book_id: str,
        recipe: schema.BookRecipe,
        events: list[Record],
        cover: bytes,
        cover_type: str,
    ) -> BookFile:
        """The plan of book `book_id`'s file over its chosen chapters (each done)."""
        kept = await self._kept_frames(events, book_id)
        reader = self._reader
        source = BOOK_FORMATS[recipe.format]
        parts: list[AudiobookChapter] = []
        files: list[tuple[str, casts.CastFile]] = []
        for n in sorted(chosen_of(events)):
            chapter = recipe.chapters[n]
            file = await reader.finished_file(chapter.cast)
            found = kept.get((chapter.cast, file.etag))
            if found is None:
                table = await self._frame_table(chapter.cast, file, source)
                samples = await self._samples(chapter.cast)
                with store_trouble("keeping a chapter's frames"):
                    await self._store.append(
                        schema.book_stream(book_id),
                        [schema.frames_record(n, chapter.cast, file.etag, samples, table)],
                    )
                found = (samples, table)
            parts.append(AudiobookChapter(chapter.title, found[0], found[1]))
            files.append((chapter.cast, file))
        plan = await asyncio.to_thread(
            plan_audiobook,
            recipe.format,
            parts,
            title=recipe.title,
            author=recipe.author,
            cover=cover,
            cover_type=cover_type,
        )
        return BookFile(plan, files, _etag(book_id, recipe.format, files, plan.size))

    async def stream(
        self, file: BookFile, start: int = 0, stop: int | None = None
    ) -> AsyncGenerator[bytes, None]:
        """The bytes `[start, stop)` of the file `file` plans (`file.plan.size` in all; None:
        to its end), chapter after chapter from their casts' records. A chapter wholly
        outside the range is not read; the one the range starts in is read from its start
        (its bytes in the file follow from all of its records before)."""
        plan = file.plan
        stop = plan.size if stop is None else min(stop, plan.size)

        def within(piece: bytes, at: int) -> bytes:
            return piece[max(start - at, 0) : max(stop - at, 0)]

        if start < len(plan.head):
            yield within(plan.head, 0)
        for index, (cast, layout) in enumerate(file.chapters):
            mark = plan.marks[index]
            if mark.offset + mark.size <= start:
                continue
            if mark.offset >= stop:
                break
            writer, at = plan.chapter(index), mark.offset
            async with aclosing(self._reader.file_bytes(cast, layout, 0, layout.size)) as pieces:
                async for piece in pieces:
                    out = writer.feed(piece)
                    part = within(out, at) if out else b""
                    at += len(out)
                    if part:
                        yield part
                    if at >= stop:
                        break
            if at >= mark.offset + mark.size:
                writer.close()  # checks the chapter came out at its planned size

    async def _frame_table(self, cast: str, file: casts.CastFile, source: str) -> bytes:
        """A finished cast's frame table, read from its records a piece at a time (each record
        holds whole frames), never its whole file at once, and counted on a thread."""
        tables: list[bytes] = []
        pending: list[bytes] = []
        size = 0
        async for piece in self._reader.file_bytes(cast, file, 0, file.size):
            pending.append(piece)
            size += len(piece)
            if size >= _TABLE_BATCH:
                tables.append(await asyncio.to_thread(frame_table, source, b"".join(pending)))
                pending, size = [], 0
        if pending:
            tables.append(await asyncio.to_thread(frame_table, source, b"".join(pending)))
        return b"".join(tables)

    async def _kept_frames(
        self, events: list[Record], book_id: str
    ) -> dict[tuple[str, str], tuple[int, bytes]]:
        """The frame tables kept in the book's stream, by (cast, layout etag)."""
        kept: dict[tuple[str, str], tuple[int, bytes]] = {}
        frames = schema.BookEvent.FRAMES.value.encode()
        seqs = [e.seq_num for e in events if e.header(schema.H_EVENT) == frames]
        stream = schema.book_stream(book_id)
        with store_trouble("reading a book's frames"):
            for seq in seqs:
                batch = await self._store.read(stream, seq, max_records=1)
                for record in batch.records:
                    cast = (record.header(schema.H_BOOK_CAST) or b"").decode()
                    etag = (record.header(schema.H_BOOK_ETAG) or b"").decode()
                    samples = int(record.header(schema.H_BOOK_SAMPLES) or b"0")
                    kept[(cast, etag)] = (samples, record.body)
        return kept

    async def _samples(self, cast_id: str) -> int:
        """A finished cast's length in samples, from its eos (an eos written before it kept
        them: from its milliseconds)."""
        with store_trouble("reading a cast's end"):
            head = await casts.read_head(self._store, cast_id)
        if head.last is not None and head.event == schema.Event.EOS:
            eos = schema.decode(head.last.body, schema.Eos)
            return eos.samples or eos.audio_ms * SAMPLE_RATE // 1000
        raise BookNotReady("A chapter of the book is not done.")


def _etag(book_id: str, fmt: str, files: list[tuple[str, casts.CastFile]], size: int) -> str:
    """A book file's strong etag: its book, format, size and each chapter's cast and layout
    (a chapter made again, or another chosen, is another file)."""
    digest = hashlib.blake2b(digest_size=12)
    for part in (book_id, fmt, str(size), *(f"{cast}:{file.etag}" for cast, file in files)):
        digest.update(part.encode() + b"\0")
    return f'"b-{digest.hexdigest()}"'
