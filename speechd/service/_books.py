"""The book service: a book in (an EPUB, a Markdown or a plain-text document), its chapters
made as casts in the background, its status read back; HTTP-free.

    BookService.create(BookRequest)   read the upload (bounded, off the event loop), claim
                                      `books/<id>` (a keyed hash of the upload and the options
                                      that change its audio: the same upload is the same book),
                                      then submit each chosen chapter as an ordinary cast with a
                                      background job (`speechd.casts.submit`); -> BookStatus
    BookService.status(id)            the chapters, each its cast's state; progress and an ETA
    BookService.cancel(id)            its chapters stop being made (`CancelBook` in `jobs`)
    BookService.listen(id, n)         chapter `n`'s cast, made at listener priority from now

A chapter's cast is any cast: content-addressed (two books with the same chapter share it),
followed, replayed and resumed as every cast is. Posting the same upload again finds the book:
it chooses the chapters asked for as well, makes a cancelled book again (a new background job
for each chosen chapter not done: each goes on from the audio it made), gives a chapter
whose cast never got its job (a crash between the claim and the submit) one, and makes a
failed chapter again (as the same cast request does).

The layout of `books/<id>` and the ids are `speechd.casts`'s (`schema.BookRecipe`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable

import msgspec

from speechd import casts
from speechd.audio import SAMPLE_RATE
from speechd.books import BookLimits, read_book
from speechd.casts import QueueLine, schema
from speechd.durable import AppendRecord, Record, SeqMismatch, Store
from speechd.errors import BookNotFound, BookNotReady, BookTooLarge, InvalidRequest

from ._book_files import BOOK_FORMATS, BookFile, BookFiles, chosen_of
from ._book_shapes import (
    BookChapterStatus,
    BookRequest,
    BookStatus,
    ChapterVoice,
    check_chapters,
    check_overridden,
    chosen_indices,
    is_cancelled,
)
from ._casts import CastService
from ._requests import MODEL, check_speed
from ._trouble import store_trouble

__all__ = [
    "BOOK_FORMATS",
    "BookChapterStatus",
    "BookFile",
    "BookRequest",
    "BookService",
    "BookStatus",
]

_MAX_COVER_BYTES = 512 * 1024  # a larger cover is left out (it is one record of the stream)
_PAGE = 1000
_MAX_CHAPTER_VOICES = 32  # distinct voices one book's chapters may name (each is resolved)


class BookService:
    """Makes and reads books over a `CastService`'s store. One per app."""

    def __init__(
        self,
        service: CastService,
        store: Store,
        secret: bytes,
        *,
        limits: BookLimits | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._service = service
        self._store = store
        self._secret = secret
        self.limits = limits if limits is not None else BookLimits()
        """The bounds of one book (`max_bytes`: what a door reads of an upload at most)."""
        self._clock = clock
        self._line = QueueLine(store)
        self._files = BookFiles(store, service.reader)

    # -- making ---------------------------------------------------------------------------

    async def create(self, request: BookRequest) -> BookStatus:
        """Check `request`, read its book and make its chosen chapters (see the module
        docstring); BadBook / BookTooLarge for an upload that cannot be read or is too big,
        InvalidRequest for bad options. Nothing is written unless every check passes."""
        if len(request.data) > self.limits.max_bytes:
            raise BookTooLarge(
                f"The book is too large: the upload holds more than "
                f"{self.limits.max_bytes:,} bytes.",
                limit="max_bytes",
            )
        chapter_format = BOOK_FORMATS.get(request.format)
        if chapter_format is None:
            raise InvalidRequest(
                f"Unsupported book format {request.format[:20]!r}; use m4b or mp3.",
                param="format",
            )
        speed = check_speed(request.speed)
        voice, lang = await self._service.resolve_voice(request.voice)
        book_voice = ChapterVoice(voice, lang, speed)
        own = await self._own_voices(request, book_voice)
        overrides = {
            n - 1: (own[n].voice if n in request.chapter_voices else "",
                    own[n].speed if n in request.chapter_speeds else 0.0)
            for n in own
        }  # fmt: skip
        book_id = await asyncio.to_thread(
            casts.book_id,
            self._secret,
            upload=request.data,
            kind=request.kind,
            voice=voice,
            speed=speed,
            format=request.format,
            alt_text=request.alt_text,
            overrides=overrides,
            scope=request.scope,
        )

        def reads(count: int) -> list[ChapterVoice]:
            check_overridden(own, count, "chapter_voices, chapter_speeds")
            return [own.get(n, book_voice) for n in range(1, count + 1)]

        found = await self._recipe(book_id)
        if found is not None:
            chosen = chosen_indices(request.chapters, len(found.chapters))
            return await self._again(book_id, found, chosen, request, reads(len(found.chapters)))
        book = await asyncio.to_thread(
            read_book, request.data, request.kind, limits=self.limits, alt_text=request.alt_text
        )
        chosen = chosen_indices(request.chapters, len(book.chapters))
        voices = reads(len(book.chapters))
        checked = await asyncio.to_thread(check_chapters, book, voices, chapter_format, self.limits)
        ids = [
            casts.cast_id(
                self._secret,
                model=MODEL,
                voice=c.voice,
                speed=c.speed,
                format=chapter_format,
                text=c.text,
                input_format="text",
                normalize=True,
                scope=request.scope,
            )
            for c in checked
        ]
        now_ms = int(self._clock() * 1000)
        recipe = schema.BookRecipe(
            kind=book.kind,
            title=book.title,
            author=book.author,
            language=book.language,
            voice=voice,
            speed=speed,
            format=request.format,
            created_ms=now_ms,
            chapters=[
                schema.BookChapter(
                    title=ch.title,
                    chars=len(c.text),
                    cast=cid,
                    voice=overrides.get(n, ("", 0.0))[0],
                    speed=overrides.get(n, ("", 0.0))[1],
                )
                for n, (ch, c, cid) in enumerate(zip(book.chapters, checked, ids, strict=True))
            ],
            cover_type=book.cover_type if len(book.cover) <= _MAX_COVER_BYTES else "",
            alt_text=request.alt_text,
        )
        cover = book.cover if recipe.cover_type else b""
        stream = schema.book_stream(book_id)
        with store_trouble("creating a book"):
            try:
                await self._store.append(
                    stream, schema.recipe_records(recipe, cover, chosen), match_seq_num=0
                )
                created = True
            except SeqMismatch:  # an identical request claimed it first: it makes it
                created = False
            if created:
                for n in chosen:
                    title = f"{recipe.title} - {book.chapters[n].title}".strip(" -")
                    await casts.submit(
                        self._store,
                        ids[n],
                        checked[n].recipe(title=title[:200], created_ms=now_ms),
                        sample_rate=SAMPLE_RATE,
                        background=True,
                        book=book_id,
                        clock=self._clock,
                    )
        status = await self.status(book_id)
        return msgspec.structs.replace(status, created=created)

    async def _again(
        self,
        book_id: str,
        recipe: schema.BookRecipe,
        chosen: list[int],
        request: BookRequest,
        voices: list[ChapterVoice],
    ) -> BookStatus:
        """The same upload posted again: choose its chapters too, make it again if it was
        cancelled, give a chosen chapter that never got a job one, and make a failed one
        again."""
        events = await self._events(book_id)
        was = chosen_of(events)
        cancelled = is_cancelled(events)
        stream = schema.book_stream(book_id)
        new = [n for n in chosen if n not in was]
        missing = [n for n in chosen if n in was and await self._to_submit(recipe, n)]
        with store_trouble("making a book again"):
            if new:
                await self._store.append(stream, [schema.book_event(schema.BookEvent.SELECT, new)])
            if cancelled:
                await self._store.append(stream, [schema.book_event(schema.BookEvent.RESUME)])
                again = sorted((was | set(chosen)) - set(new) - set(missing))
                jobs = [_background_job(recipe.chapters[n].cast, book_id) for n in again]
                if jobs:
                    await self._store.append(schema.JOBS, jobs)
        if new or missing:
            book = await asyncio.to_thread(
                read_book, request.data, request.kind, limits=self.limits, alt_text=recipe.alt_text
            )
            fmt = BOOK_FORMATS[recipe.format]
            checked = await asyncio.to_thread(check_chapters, book, voices, fmt, self.limits)
            now_ms = int(self._clock() * 1000)
            with store_trouble("submitting a book's chapters"):
                for n in sorted({*new, *missing}):
                    title = f"{recipe.title} - {recipe.chapters[n].title}".strip(" -")
                    await casts.submit(
                        self._store,
                        recipe.chapters[n].cast,
                        checked[n].recipe(title=title[:200], created_ms=now_ms),
                        sample_rate=SAMPLE_RATE,
                        background=True,
                        book=book_id,
                        clock=self._clock,
                    )
        return await self.status(book_id)

    async def cancel(self, book_id: str) -> BookStatus:
        """Stop making the book: its chapters waiting are skipped, the one being made stops
        after its chunk in flight (what was made stays: posting the book again goes on from
        it). A book done, or cancelled already, is left as it is."""
        status = await self.status(book_id)
        if status.state in ("done", "cancelled"):
            return status
        with store_trouble("cancelling a book"):
            await self._store.append(
                schema.book_stream(book_id), [schema.book_event(schema.BookEvent.CANCEL)]
            )
            await self._store.append(
                schema.JOBS, [AppendRecord(schema.encode(schema.CancelBook(book_id)))]
            )
        return await self.status(book_id)

    async def listen(self, book_id: str, number: int) -> str:
        """Chapter `number` (from 1)'s cast id, made at listener priority from now on if it is
        not done: someone is listening to it (a foreground job, appended once per book and
        chapter)."""
        recipe = await self._require(book_id)
        if not 1 <= number <= len(recipe.chapters):
            raise BookNotFound(f"The book has no chapter {number}.", param="chapter")
        index = number - 1
        cast = recipe.chapters[index].cast
        events = await self._events(book_id)
        if any(
            e.header(schema.H_EVENT) == schema.BookEvent.LISTEN.value.encode()
            and schema.chapters_of(e) == [index]
            for e in events
        ):
            return cast
        if not await self._exists(recipe, index):
            raise BookNotFound(f"Chapter {number} of the book was not chosen.", param="chapter")
        state = (await self._service.status(cast)).state
        if state in (casts.CastState.DONE, casts.CastState.FAILED):
            return cast
        with store_trouble("opening a book's chapter"):
            await self._store.append(
                schema.book_stream(book_id),
                [schema.book_event(schema.BookEvent.LISTEN, [index])],
            )
            await self._store.append(schema.JOBS, [AppendRecord(schema.encode(schema.Job(cast)))])
        return cast

    async def _own_voices(
        self, request: BookRequest, book: ChapterVoice
    ) -> dict[int, ChapterVoice]:
        """The chapters (from 1) read in a voice or at a speed of their own, each as it is
        read (the rest as the `book`); UnknownVoice, InvalidRequest. Each distinct voice is
        resolved once."""
        named = set(request.chapter_voices.values())
        if len(named) > _MAX_CHAPTER_VOICES:
            raise InvalidRequest(
                f"chapter_voices names more than {_MAX_CHAPTER_VOICES} voices.",
                param="chapter_voices",
            )
        resolved: dict[str, tuple[str, str]] = {}
        for name in sorted(named):
            try:
                resolved[name] = await self._service.resolve_voice(name)
            except InvalidRequest as exc:  # an unknown voice: name the option it came in
                exc.param = "chapter_voices"
                raise
        speeds = {
            n: check_speed(s, param="chapter_speeds") for n, s in request.chapter_speeds.items()
        }
        own: dict[int, ChapterVoice] = {}
        for n in sorted({*request.chapter_voices, *speeds}):
            voice, lang = resolved.get(request.chapter_voices.get(n, ""), (book.voice, book.lang))
            own[n] = ChapterVoice(voice, lang, speeds.get(n, book.speed))
        return own

    # -- reading --------------------------------------------------------------------------

    async def status(self, book_id: str) -> BookStatus:
        """Where the book stands (see `BookStatus`); BookNotFound."""
        recipe = await self._require(book_id)
        events = await self._events(book_id)
        chosen, cancelled = chosen_of(events), is_cancelled(events)
        chapters: list[BookChapterStatus] = []
        made = 0.0
        left = 0
        for n, chapter in enumerate(recipe.chapters):
            state, audio_ms, part = "not_made", 0, 0.0
            if n in chosen and await self._exists(recipe, n):
                cast = await self._service.status(chapter.cast)
                state, audio_ms = cast.state.value, cast.audio_ms
                if cast.state == casts.CastState.DONE:
                    part = 1.0
                elif cast.chunks_planned:
                    part = min(cast.chunks_done / cast.chunks_planned, 1.0)
                if state == "loading":
                    state = "queued"
                if cancelled and state in ("queued", "generating"):
                    state = "not_made"
            if n in chosen:
                made += part * chapter.chars
                left += round((1.0 - part) * chapter.chars)
            chapters.append(
                BookChapterStatus(
                    number=n + 1,
                    title=chapter.title,
                    chars=chapter.chars,
                    cast=chapter.cast,
                    chosen=n in chosen,
                    state=state,
                    audio_ms=audio_ms,
                    voice=chapter.voice or recipe.voice,
                    speed=chapter.speed or recipe.speed,
                )
            )
        total = sum(recipe.chapters[n].chars for n in chosen)
        states = {c.state for c in chapters if c.chosen}
        if states <= {"done"}:
            overall = "done"
        elif "failed" in states:
            overall = "failed"
        elif cancelled:
            overall = "cancelled"
        elif states <= {"queued", "not_made"}:
            overall = "queued"
        else:
            overall = "generating"
        eta = None
        if left and overall in ("queued", "generating"):
            workers = [w.worker for w in (await self._service.health()).ready]
            with store_trouble("reading the queue"):
                eta = await self._line.making_s(left, recipe.speed, workers=workers)
        return BookStatus(
            id=book_id,
            state=overall,
            kind=recipe.kind,
            title=recipe.title,
            author=recipe.author,
            language=recipe.language,
            voice=recipe.voice,
            speed=recipe.speed,
            format=recipe.format,
            created_ms=recipe.created_ms,
            progress=round(made / total, 4) if total else 1.0,
            eta_s=None if eta is None else round(eta, 1),
            chapters=chapters,
            has_cover=bool(recipe.cover_type),
        )

    async def audiobook(self, book_id: str, fmt: str) -> BookFile:
        """The plan of the book's file in `fmt` (its own format: `m4b` or `mp3`) over its
        chosen chapters, every one done (BookNotReady otherwise; see `BookFiles`)."""
        recipe = await self._require(book_id)
        if fmt != recipe.format:
            raise BookNotFound(
                f"This book is made as {recipe.format}: ask for audio.{recipe.format}.",
                param="format",
            )
        status = await self.status(book_id)
        if status.state != "done":
            raise BookNotReady(
                f"The book is not done ({status.state}, {status.progress:.0%}); its file is "
                "served once every chosen chapter is."
            )
        events = await self._events(book_id)
        cover, cover_type = await self.cover(book_id)
        return await self._files.plan(book_id, recipe, events, cover, cover_type)

    def audiobook_bytes(
        self, file: BookFile, start: int = 0, stop: int | None = None
    ) -> AsyncGenerator[bytes, None]:
        """The bytes `[start, stop)` of the file `file` plans (`file.plan.size` in all; None:
        to its end)."""
        return self._files.stream(file, start, stop)

    async def cover(self, book_id: str) -> tuple[bytes, str]:
        """The book's cover and its media type (b"", "" for none); BookNotFound."""
        recipe = await self._require(book_id)
        if not recipe.cover_type:
            return b"", ""
        with store_trouble("reading a book's cover"):
            batch = await self._store.read(schema.book_stream(book_id), 1, max_records=1)
        return (batch.records[0].body if batch.records else b""), recipe.cover_type

    async def title(self, book_id: str) -> str:
        """The book's title ("" when its document names none); BookNotFound."""
        return (await self._require(book_id)).title

    async def _require(self, book_id: str) -> schema.BookRecipe:
        if schema.is_book_id(book_id):
            found = await self._recipe(book_id)
            if found is not None:
                return found
        raise BookNotFound(f"No book with id {book_id[:40]!r}.", param="id")

    async def _recipe(self, book_id: str) -> schema.BookRecipe | None:
        with store_trouble("reading a book"):
            batch = await self._store.read(schema.book_stream(book_id), 0, max_records=1)
        if not batch.records:
            return None
        return schema.decode(batch.records[0].body, schema.BookRecipe)

    async def _events(self, book_id: str) -> list[Record]:
        """The book's event records (from seq 2), without bodies."""
        found: list[Record] = []
        seq = 2
        with store_trouble("reading a book's events"):
            while True:
                batch = await self._store.read(
                    schema.book_stream(book_id), seq, max_records=_PAGE, bodies=False
                )
                found += batch.records
                if not batch.records or len(batch.records) < _PAGE:
                    return found
                seq = batch.records[-1].seq_num + 1

    async def _to_submit(self, recipe: schema.BookRecipe, index: int) -> bool:
        """Whether chapter `index`'s cast needs a submit: never made, or failed (a submit
        makes a failed cast again, keeping the audio that can continue)."""
        with store_trouble("reading a cast's head"):
            head = await casts.read_head(self._store, recipe.chapters[index].cast)
        return head.tail == 0 or head.event == schema.Event.ERROR

    async def _exists(self, recipe: schema.BookRecipe, index: int) -> bool:
        """Whether chapter `index`'s cast was ever submitted."""
        with store_trouble("reading a cast's tail"):
            return await self._store.check_tail(schema.cast_stream(recipe.chapters[index].cast)) > 0


def _background_job(cast: str, book_id: str) -> AppendRecord:
    return AppendRecord(schema.encode(schema.Job(cast, background=True, book=book_id)))
