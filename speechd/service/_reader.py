"""The reader: everything a door reads of a cast, from the cast's public stream alone
(`docs/design/index.md#one-door-to-the-store`).

    reader.meta(id)                       its public facts (None: no such cast)
    reader.tail(id)                       how many records it has (`CastNotFound`: none)
    reader.records(id, seq, wait=...)     a page of its records from a seq, long-polling at
                                          the tail (`CastRecord`s: public headers only)
    reader.audio(id)                      its audio bytes, live until `eos`
    reader.chunks(id)                     its playable audio records with their words, live
    reader.captions(id)                   its words so far, in the cast's time
    reader.ended(id), .finished_file(id), .file_bytes(id, file, start, stop)
                                          a finished cast's whole file, laid out and read a
                                          few records at a time

The doors (the HTTP routes, the Wyoming server) read casts only through it: it names the
cast's stream only after `is_cast_id` (so no id reaches `jobs`, `catalog/*`, cursors or
receipts, whatever a request holds: an id that cannot be a cast's is `CastNotFound`), follows
the playable-sequence rule (`speechd.casts`), and raises speechd's own errors: a read past the
end of a cast is `InvalidRequest` (param `seq_num`), any other store failure
`StoreUnavailable`, with one log line (`_trouble`). What a door does with a read (a stream
slot, its shutdown, its wire shapes) is the door's.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import AsyncGenerator
from typing import Final

import msgspec

from speechd import casts
from speechd.audio import finished_bytes
from speechd.casts import schema
from speechd.durable import MAX_BATCH_BYTES, Record, SeqOutOfRange, Store
from speechd.errors import CastNotFound, InvalidRequest

from ._trouble import guarded, store_trouble

__all__ = ["CastReader", "CastRecord", "RecordPage", "checked_id"]

_FILES_KEPT: Final = 256  # layouts of finished files kept
_TERMINAL: Final = (schema.Event.EOS.value, schema.Event.ERROR.value)


class CastRecord(msgspec.Struct, frozen=True):
    """One record of a cast's public stream as a door may show it: its seq and time, its
    event (`meta`, `start`, `audio`, `eos`, `error`, `retry`; "" for none), the headers public
    reads carry (`speechd.casts.schema.public_headers`, an allow-list: the worker's plan
    position and resume checkpoint, and anything newer, stay private), and its body."""

    seq_num: int
    timestamp: int
    event: str
    headers: list[tuple[bytes, bytes]]
    body: bytes

    @property
    def terminal(self) -> bool:
        """Whether it ends the cast (`eos` or `error`): nothing follows it."""
        return self.event in _TERMINAL


class RecordPage(msgspec.Struct, frozen=True):
    """Records of a cast from some seq, and how many the cast had as they were read."""

    records: list[CastRecord]
    tail: int


def _public(record: Record) -> CastRecord:
    event = record.header(schema.H_EVENT) or b""
    return CastRecord(
        seq_num=record.seq_num,
        timestamp=record.timestamp,
        event=event.decode("utf-8", "replace"),
        headers=schema.public_headers(record),
        body=record.body,
    )


def checked_id(cast_id: str) -> str:
    """`cast_id`, once it is known to have a cast id's shape (else `CastNotFound`): checked
    before any stream is named after it."""
    if not casts.is_cast_id(cast_id):
        raise CastNotFound("No cast with this id.", param="id")
    return cast_id


def _stream(cast_id: str) -> str:
    return schema.cast_stream(checked_id(cast_id))


class CastReader:
    """Reads casts on one store for the doors; one per service, shared by every request."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._words = casts.CastWords(store)
        self._files: OrderedDict[str, casts.CastFile] = OrderedDict()

    async def meta(self, cast_id: str) -> schema.Meta | None:
        """The cast's public facts (its first record), or None if there is no such cast."""
        if not casts.is_cast_id(cast_id):
            return None
        with store_trouble("reading a cast's meta"):
            batch = await self._store.read(schema.cast_stream(cast_id), 0, max_records=1)
        if not batch.records:
            return None
        return schema.decode(batch.records[0].body, schema.Meta)

    async def tail(self, cast_id: str) -> int:
        """How many records the cast has now; `CastNotFound` when it has none."""
        stream = _stream(cast_id)
        with store_trouble("reading a cast's tail"):
            tail = await self._store.check_tail(stream)
        if tail == 0:
            raise CastNotFound(f"No cast with id {cast_id!r}.", param="id")
        return tail

    async def records(
        self,
        cast_id: str,
        seq_num: int,
        *,
        max_records: int = 1000,
        max_bytes: int = MAX_BATCH_BYTES,
        wait: float = 0.0,
    ) -> RecordPage:
        """The cast's records from `seq_num` (at least one when any is there, whatever its
        size); at the tail, waiting up to `wait` seconds for one. `InvalidRequest` for a seq
        past the cast's end; a cast that does not exist reads as one with no records."""
        stream = _stream(cast_id)
        with store_trouble("reading a cast's records"):
            try:
                batch = await self._store.read(
                    stream, seq_num, max_records=max_records, max_bytes=max_bytes, wait=wait
                )
            except SeqOutOfRange as exc:  # a seq past the end (or a cast removed meanwhile)
                raise InvalidRequest(
                    f"seq_num {exc.seq_num} is past the end of the cast ({exc.tail} records).",
                    param="seq_num",
                ) from exc
        return RecordPage([_public(r) for r in batch.records], batch.tail)

    def audio(self, cast_id: str) -> AsyncGenerator[bytes, None]:
        """The cast's audio bytes, live until `eos`, skipping records that hold none (an
        encoder may not have a whole frame yet); raises `CastFailed` if the cast fails."""
        audio = _audible(casts.cast_audio(self._store, checked_id(cast_id)))
        return guarded(audio, "reading a cast's audio")

    def chunks(self, cast_id: str) -> AsyncGenerator[schema.AudioChunk, None]:
        """The cast's playable audio records in order, live until `eos`, each with its words
        (times within the record); raises `CastFailed` if the cast fails."""
        chunks = casts.playable_chunks(self._store, checked_id(cast_id))
        return guarded(chunks, "reading a cast's audio records")

    async def captions(self, cast_id: str) -> casts.CastCaptions:
        """The words of the cast's playable sequence as it stands now, with cast-level times
        (each record's words read once, without its audio, and kept: `CastWords`). Raises
        `CastNotFound`, and `CastFailed` for a cast that ended in `error`."""
        with store_trouble("reading a cast's words"):
            return await self._words.captions(checked_id(cast_id))

    async def ended(self, cast_id: str) -> None:
        """Return once the cast has ended in `eos` (nothing of its audio is read); raises
        `CastNotFound`, and `CastFailed` if it fails."""
        with store_trouble("waiting for a cast to end"):
            await casts.wait_ended(self._store, checked_id(cast_id))

    async def finished_file(self, cast_id: str) -> casts.CastFile:
        """The layout of a finished cast's file (kept for the files most recently asked for,
        each while its stream's birth and length stay what they were). Raises `CastNotFound`,
        and `CastFailed` unless the cast has ended in `eos`."""
        checked_id(cast_id)
        with store_trouble("reading a finished cast's file"):
            head = await casts.read_head(self._store, cast_id)
            found = self._files.pop(cast_id, None)
            if found is None or (found.tail, found.born_ms) != (head.tail, head.born_ms):
                found = await casts.lay_out(self._store, cast_id, head)
        self._files[cast_id] = found
        while len(self._files) > _FILES_KEPT:
            self._files.popitem(last=False)
        return found

    def file_bytes(
        self, cast_id: str, file: casts.CastFile, start: int, stop: int
    ) -> AsyncGenerator[bytes, None]:
        """Bytes `start` to `stop` of the finished file `file` lays out, as a whole file reads
        (`speechd.audio.finished_bytes`: a wav says its true sizes), a few records at a time."""
        body = casts.file_bytes(self._store, checked_id(cast_id), file, start, stop)
        return guarded(_as_file(body, file, start), "reading a cast's file")


async def _audible(chunks: AsyncGenerator[bytes, None]) -> AsyncGenerator[bytes, None]:
    async with contextlib.aclosing(chunks):
        async for chunk in chunks:
            if chunk:
                yield chunk


async def _as_file(
    pieces: AsyncGenerator[bytes, None], file: casts.CastFile, start: int
) -> AsyncGenerator[bytes, None]:
    offset = start
    async with contextlib.aclosing(pieces):
        async for piece in pieces:
            yield finished_bytes(file.format, piece, offset=offset, size=file.size)
            offset += len(piece)
