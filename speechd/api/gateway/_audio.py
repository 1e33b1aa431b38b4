"""A cast's audio as one file: live-growing while generating, a seekable entity once done.

A finished cast is immutable, so its file is described once by a *layout*: which records hold
its playable sequence (`speechd.casts`: the latest attempt's kept records, then its own) in
order, and where each starts in the file. The layout gives `Content-Length`, a strong `ETag`
and byte ranges without holding any audio in memory; a range is served by reading records
from the first one it touches.
"""

from __future__ import annotations

import bisect
import hashlib
import re
from collections import OrderedDict
from collections.abc import AsyncGenerator
from typing import NamedTuple

from speechd.casts import cast_audio, cast_stream, read_head
from speechd.durable import Store
from speechd.errors import CastFailed

from ._streaming import AbortBody

__all__ = [
    "AudioLayout",
    "ByteRange",
    "Layouts",
    "live_body",
    "parse_range",
    "range_body",
]

_SCAN_RECORDS = 256
_SCAN_BYTES = 4 * 1024 * 1024
_LAYOUTS_KEPT = 256


class AudioLayout(NamedTuple):
    tail: int  # the stream's length when scanned (a done cast never grows)
    seqs: list[int]  # the records holding the playable sequence, in order
    offsets: list[int]  # byte offset of each record's audio in the file, then the total length
    etag: str

    @property
    def size(self) -> int:
        return self.offsets[-1]


async def _scan(store: Store, cast_id: str, tail: int) -> AudioLayout:
    """Lay out a done cast (its last record, at `tail - 1`, is `eos`)."""
    stream = cast_stream(cast_id)
    head = await read_head(store, cast_id)
    seqs: list[int] = []
    offsets = [0]
    for span in head.spans:
        seq, end = span.seq, span.seq + span.count
        while seq < end:
            batch = await store.read(
                stream, seq, max_records=min(end - seq, _SCAN_RECORDS), max_bytes=_SCAN_BYTES
            )
            if not batch.records:
                break
            for record in batch.records[: end - seq]:
                seqs.append(record.seq_num)
                offsets.append(offsets[-1] + len(record.body))
            seq = batch.records[: end - seq][-1].seq_num + 1
    last = head.last
    stamp = f"{last.seq_num}:{last.timestamp}" if last is not None else str(tail)
    digest = hashlib.blake2b(
        f"{cast_id}:{stamp}:{offsets[-1]}".encode(), digest_size=12
    ).hexdigest()
    return AudioLayout(tail, seqs, offsets, f'"{digest}"')


class Layouts:
    """Layouts of done casts, kept for the most recently served ones."""

    def __init__(self, store: Store, kept: int = _LAYOUTS_KEPT) -> None:
        self._store = store
        self._kept = kept
        self._layouts: OrderedDict[str, AudioLayout] = OrderedDict()

    async def get(self, cast_id: str, tail: int) -> AudioLayout:
        layout = self._layouts.pop(cast_id, None)
        if layout is None or layout.tail != tail:
            layout = await _scan(self._store, cast_id, tail)
        self._layouts[cast_id] = layout
        while len(self._layouts) > self._kept:
            self._layouts.popitem(last=False)
        return layout


class ByteRange(NamedTuple):
    start: int
    stop: int  # exclusive


_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


def parse_range(header: str | None, size: int) -> ByteRange | bool | None:
    """A single byte range of `size` bytes from a `Range` header.

    None: no usable range (absent, malformed or several ranges): serve the whole file.
    False: syntactically fine but unsatisfiable (416).
    """
    if header is None:
        return None
    match = _RANGE.fullmatch(header.strip())
    if match is None:
        return None
    first, last = match.groups()
    if not first and not last:
        return None
    if not first:  # the last N bytes
        suffix = int(last)
        if suffix == 0 or size == 0:
            return False
        return ByteRange(max(0, size - suffix), size)
    start = int(first)
    stop = size if not last else int(last) + 1
    if last and stop <= start:
        return None
    if start >= size:
        return False
    return ByteRange(start, min(stop, size))


async def range_body(
    store: Store, cast_id: str, layout: AudioLayout, span: ByteRange
) -> AsyncGenerator[bytes, None]:
    """Bytes `span` of a done cast's file, read record by record from the first it touches
    (records between them that are not in the playable sequence are skipped)."""
    if span.stop <= span.start:
        return
    stream = cast_stream(cast_id)
    first = bisect.bisect_right(layout.offsets, span.start) - 1
    chunk = first
    seq = layout.seqs[first]
    while chunk < len(layout.seqs) and layout.offsets[chunk] < span.stop:
        batch = await store.read(stream, seq, max_records=_SCAN_RECORDS, max_bytes=_SCAN_BYTES)
        if not batch.records:
            return
        for record in batch.records:
            seq = record.seq_num + 1
            if chunk >= len(layout.seqs) or layout.offsets[chunk] >= span.stop:
                return
            if record.seq_num != layout.seqs[chunk]:
                continue
            begin = layout.offsets[chunk]
            body = record.body
            yield body[max(0, span.start - begin) : span.stop - begin]
            chunk += 1


async def live_body(store: Store, cast_id: str) -> AsyncGenerator[bytes, None]:
    """A generating cast's audio as it is appended; ends incomplete if the cast fails."""
    try:
        async for data in cast_audio(store, cast_id):
            yield data
    except CastFailed as exc:
        raise AbortBody(str(exc)) from exc
