"""A finished cast's audio as one file: its layout, read from headers alone, and its bytes read
from the store a few records at a time.

A finished cast never changes, so its file is described once by a *layout* (`CastFile`): which
records hold its playable sequence (the latest attempt's kept records, then its own, as
`_playable` works them out) in order, and where each starts in the file. It gives the file's
size before a byte is sent (`Content-Length`), a strong validator (`etag`) and byte ranges; it
is read without any record's body (`Store.read(..., bodies=False)`), so laying out a file of
any length reads a few kilobytes per hundred records. `file_bytes` then reads the records a
range touches, a few at a time (at most `_READ_BYTES` a read), so a slow reader holds about one
record in memory, never the file.

`wait_ended` waits for a cast to end (headers only, long-polling at the tail): what a caller
that wants the whole file does before laying it out.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
from collections.abc import AsyncGenerator
from typing import Final, NamedTuple

from speechd.durable import SeqOutOfRange, Store
from speechd.errors import CastFailed, CastNotFound

from ._playable import CastHead, read_head
from ._records import Event, event_of
from ._streams import cast_stream

__all__ = ["CastFile", "file_bytes", "lay_out", "wait_ended"]

_LAYOUT_RECORDS: Final = 256  # headers read at a time while laying a file out
_LAYOUT_BYTES: Final = 2 * 1024 * 1024
_READ_RECORDS: Final = 16  # records read at a time while serving bytes
_READ_BYTES: Final = 1024 * 1024  # ... (at least one record, whatever its size)
_WAIT_S: Final = 30.0


class CastFile(NamedTuple):
    """The layout of a finished cast's file."""

    tail: int  # the stream's length when laid out (a finished cast never grows)
    born_ms: int  # the stream's birth (`CastHead.born_ms`): a cast made again has another
    format: str  # the cast's audio format
    seqs: list[int]  # the records holding the playable sequence, in order
    offsets: list[int]  # where each record's audio starts in the file, then the total length
    etag: str  # a strong validator, quoted

    @property
    def size(self) -> int:
        return self.offsets[-1]


def _failed(head: CastHead) -> CastFailed:
    message = head.failure.message if head.failure is not None else "unknown"
    return CastFailed(f"The cast could not be synthesized: {message}")


async def wait_ended(store: Store, cast_id: str) -> CastHead:
    """The cast's head once it has ended in `eos`, read without any audio. Raises
    `CastNotFound`, and `CastFailed` if it ends in `error`."""
    stream = cast_stream(cast_id)
    while True:
        head = await read_head(store, cast_id)
        if head.tail == 0 or head.meta is None:
            raise CastNotFound(f"No cast with id {cast_id!r}.", param="id")
        if head.event == Event.EOS:
            return head
        if head.event == Event.ERROR:
            raise _failed(head)
        seq = head.tail
        with contextlib.suppress(SeqOutOfRange):  # removed meanwhile: the head says so
            while True:  # follow the headers to the end, then read the head once more
                batch = await store.read(
                    stream, seq, max_records=_LAYOUT_RECORDS, wait=_WAIT_S, bodies=False
                )
                if any(event_of(r) in (Event.EOS, Event.ERROR) for r in batch.records):
                    break
                if batch.records:
                    seq = batch.records[-1].seq_num + 1


async def lay_out(store: Store, cast_id: str, head: CastHead | None = None) -> CastFile:
    """The layout of a finished cast's file (`head`: its head, if already read). Raises
    `CastNotFound`, and `CastFailed` unless the cast has ended in `eos`."""
    head = head or await read_head(store, cast_id)
    if head.tail == 0 or head.meta is None:
        raise CastNotFound(f"No cast with id {cast_id!r}.", param="id")
    if head.event != Event.EOS:
        raise _failed(head) if head.event == Event.ERROR else CastFailed("The cast is not done.")
    stream = cast_stream(cast_id)
    seqs: list[int] = []
    offsets = [0]
    for span in head.spans:
        seq, end = span.seq, span.seq + span.count
        while seq < end:
            batch = await store.read(
                stream,
                seq,
                max_records=min(end - seq, _LAYOUT_RECORDS),
                max_bytes=_LAYOUT_BYTES,
                bodies=False,
            )
            records = batch.records[: end - seq]
            if not records:  # removed meanwhile
                raise CastNotFound(f"No cast with id {cast_id!r}.", param="id")
            for record in records:
                seqs.append(record.seq_num)
                offsets.append(offsets[-1] + record.body_size)
            seq = records[-1].seq_num + 1
    last = head.last
    stamp = f"{head.born_ms}:{last.seq_num}:{last.timestamp}" if last is not None else ""
    digest = hashlib.blake2b(
        f"{cast_id}:{stamp}:{offsets[-1]}".encode(), digest_size=12
    ).hexdigest()
    return CastFile(head.tail, head.born_ms, head.meta.format, seqs, offsets, f'"{digest}"')


async def file_bytes(
    store: Store, cast_id: str, file: CastFile, start: int, stop: int
) -> AsyncGenerator[bytes, None]:
    """Bytes `start` to `stop` (exclusive) of the file `file` lays out, as the records hold
    them (a wav's streamed header included: see `speechd.audio.finished_bytes`), read from the
    first record they touch, a few records at a time (records between them that are not in
    the playable sequence are skipped). Ends early if the cast is removed meanwhile."""
    if stop <= start or not file.seqs:
        return
    stream = cast_stream(cast_id)
    index = bisect.bisect_right(file.offsets, start) - 1
    last_seq = file.seqs[min(bisect.bisect_left(file.offsets, stop) - 1, len(file.seqs) - 1)]
    seq = file.seqs[index]
    while index < len(file.seqs) and file.offsets[index] < stop:
        wanted = min(_READ_RECORDS, last_seq - seq + 1)  # no record past the range's last
        batch = await store.read(stream, seq, max_records=wanted, max_bytes=_READ_BYTES)
        if not batch.records:
            return
        for record in batch.records:
            seq = record.seq_num + 1
            if index >= len(file.seqs) or file.offsets[index] >= stop:
                return
            if record.seq_num != file.seqs[index]:
                continue
            begin = file.offsets[index]
            yield record.body[max(0, start - begin) : stop - begin]
            index += 1
