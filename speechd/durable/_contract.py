"""The stream store contract: records, the async `Store` interface, and its errors.

Errors:

    DurableError
    ├── InvalidStreamName      the name is empty, too long, or malformed
    ├── RecordTooLarge         a record or batch is over the limits below
    ├── SeqMismatch            a conditional append found another next seq (`.next_seq`)
    ├── SeqOutOfRange          a read started past the stream's tail (`.tail`)
    └── StoreClosed            the store was used after `close()`

Semantics every backend keeps (the conformance suite in tests/durable checks them):

* A stream springs into existence at its first append; a missing stream reads exactly like an
  empty one (`check_tail` is 0, `read` from 0 returns nothing or waits), so `match_seq_num=0`
  is a claim: it succeeds for exactly one appender.
* `seq_num`s are dense from 0. An append is atomic for its whole batch and durable once acked.
* `read` at the tail returns no records (after waiting up to `wait` seconds for one); `read`
  past the tail raises `SeqOutOfRange`. A read returns at least one record when any is
  available, even if that record alone is over `max_bytes`.
* `delete` removes a stream; a later append starts it again from seq 0. A read waiting past
  the new tail of a deleted stream ends with `SeqOutOfRange`, so a follower learns of it.
* A record's body and header names and values are `bytes`; anything else is a `TypeError`,
  raised before anything of the batch is written.
"""

from __future__ import annotations

import abc
import re
from collections.abc import AsyncIterator, Sequence
from typing import TypeVar

import msgspec

__all__ = [
    "MAX_BATCH_BYTES",
    "MAX_BATCH_RECORDS",
    "MAX_BODY_BYTES",
    "MAX_HEADER_BYTES",
    "MAX_NAME_BYTES",
    "AppendAck",
    "AppendRecord",
    "DurableError",
    "InvalidStreamName",
    "ReadBatch",
    "Record",
    "RecordTooLarge",
    "SeqMismatch",
    "SeqOutOfRange",
    "Store",
    "StoreClosed",
    "StreamInfo",
    "validate_name",
]

MAX_NAME_BYTES = 512
MAX_BODY_BYTES = 1024 * 1024
MAX_HEADER_BYTES = 64 * 1024
MAX_BATCH_RECORDS = 1000
MAX_BATCH_BYTES = 8 * 1024 * 1024

Headers = tuple[tuple[bytes, bytes], ...]


class Record(msgspec.Struct, frozen=True):
    """One stored record. `timestamp` is milliseconds since the epoch, set by the store."""

    seq_num: int
    timestamp: int
    headers: Headers
    body: bytes

    def header(self, name: bytes) -> bytes | None:
        """The value of the first header called `name`, or None."""
        for key, value in self.headers:
            if key == name:
                return value
        return None


class AppendRecord(msgspec.Struct, frozen=True):
    """A record to append; the store assigns its seq_num and timestamp."""

    body: bytes = b""
    headers: Headers = ()


class AppendAck(msgspec.Struct, frozen=True):
    """Where an acknowledged (durable) batch landed: seqs `start_seq` .. `next_seq - 1`."""

    start_seq: int
    next_seq: int
    timestamp: int


class ReadBatch(msgspec.Struct, frozen=True):
    """Records from a read, and the stream's next seq as the read saw it."""

    records: list[Record]
    tail: int


class StreamInfo(msgspec.Struct, frozen=True):
    name: str
    next_seq: int
    touched_ms: int


class DurableError(Exception):
    """Base of the store's errors."""


class InvalidStreamName(DurableError, ValueError):
    pass


class RecordTooLarge(DurableError, ValueError):
    pass


class SeqMismatch(DurableError):
    """A conditional append expected `expected` as the next seq; the stream is at `next_seq`."""

    def __init__(self, stream: str, expected: int, next_seq: int) -> None:
        super().__init__(f"{stream}: expected next seq {expected}, stream is at {next_seq}")
        self.stream = stream
        self.expected = expected
        self.next_seq = next_seq


class SeqOutOfRange(DurableError):
    """A read started at `seq_num`, past the stream's `tail`."""

    def __init__(self, stream: str, seq_num: int, tail: int) -> None:
        super().__init__(f"{stream}: seq {seq_num} is past the tail {tail}")
        self.stream = stream
        self.seq_num = seq_num
        self.tail = tail


class StoreClosed(DurableError):
    pass


_SEGMENT = re.compile(r"[A-Za-z0-9_\-.]+")


def validate_name(name: str) -> str:
    """Return `name` if it is a valid stream name, else raise `InvalidStreamName`.

    A name is 1-512 bytes of `/`-separated segments, each made of letters, digits, `_`, `-`
    and `.`, none empty and none `.` or `..`.
    """
    if not isinstance(name, str) or not name:
        raise InvalidStreamName("stream name must be a non-empty string")
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        raise InvalidStreamName(f"stream name is longer than {MAX_NAME_BYTES} bytes")
    for segment in name.split("/"):
        if not _SEGMENT.fullmatch(segment) or segment in (".", ".."):
            raise InvalidStreamName(f"malformed stream name {name!r}")
    return name


def _check_types(record: AppendRecord) -> None:
    # AppendRecord is not type-checked when built; a str that slipped in would be stored and
    # then fail every read of the stream, so it is refused here, before anything is written.
    if not isinstance(record, AppendRecord):
        raise TypeError(f"expected an AppendRecord, got {type(record).__name__}")
    if not isinstance(record.body, bytes):
        raise TypeError(f"a record body must be bytes, not {type(record.body).__name__}")
    for header in record.headers:
        if not (
            isinstance(header, tuple | list)
            and len(header) == 2
            and isinstance(header[0], bytes)
            and isinstance(header[1], bytes)
        ):
            raise TypeError(f"a header must be a (bytes, bytes) pair, not {header!r:.80}")


def check_batch(records: Sequence[AppendRecord]) -> int:
    """Validate a batch's types and limits; return its size in bytes.

    Raises `TypeError` for a record that is not bytes where bytes belong, `RecordTooLarge` for
    one over the limits; either way, nothing of the batch is written.
    """
    if not records:
        raise RecordTooLarge("an append needs at least one record")
    if len(records) > MAX_BATCH_RECORDS:
        raise RecordTooLarge(f"a batch holds at most {MAX_BATCH_RECORDS} records")
    total = 0
    for record in records:
        _check_types(record)
        if len(record.body) > MAX_BODY_BYTES:
            raise RecordTooLarge(f"a record body holds at most {MAX_BODY_BYTES} bytes")
        header_bytes = sum(len(k) + len(v) for k, v in record.headers)
        if header_bytes > MAX_HEADER_BYTES:
            raise RecordTooLarge(f"a record's headers hold at most {MAX_HEADER_BYTES} bytes")
        total += len(record.body) + header_bytes
    if total > MAX_BATCH_BYTES:
        raise RecordTooLarge(f"a batch holds at most {MAX_BATCH_BYTES} bytes")
    return total


_S = TypeVar("_S", bound="Store")


class Store(abc.ABC):
    """An async stream store. Open one per event loop; close it when done."""

    @abc.abstractmethod
    async def append(
        self,
        stream: str,
        records: Sequence[AppendRecord],
        *,
        match_seq_num: int | None = None,
    ) -> AppendAck:
        """Append `records` atomically; with `match_seq_num`, only if the next seq is that."""

    @abc.abstractmethod
    async def read(
        self,
        stream: str,
        seq_num: int = 0,
        *,
        max_records: int = 1000,
        max_bytes: int = MAX_BATCH_BYTES,
        wait: float = 0,
    ) -> ReadBatch:
        """Records from `seq_num`; at the tail, wait up to `wait` seconds for one to land."""

    @abc.abstractmethod
    async def check_tail(self, stream: str) -> int:
        """The stream's next seq (0 for a missing stream)."""

    @abc.abstractmethod
    async def list(self, prefix: str = "", *, limit: int = 1000) -> list[StreamInfo]:
        """Streams whose name starts with `prefix`, in name order."""

    @abc.abstractmethod
    async def delete(self, stream: str) -> bool:
        """Remove a stream; True if it existed."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release the store's resources; later calls raise `StoreClosed`."""

    async def follow(self, stream: str, seq_num: int = 0) -> AsyncIterator[Record]:
        """Yield the records from `seq_num` on, then live ones as they land, until cancelled."""
        while True:
            batch = await self.read(stream, seq_num, wait=30.0)
            for record in batch.records:
                yield record
            if batch.records:
                seq_num = batch.records[-1].seq_num + 1

    @abc.abstractmethod
    async def sweep(self, max_age_s: float, prefixes: Sequence[str]) -> int:
        """Delete streams under `prefixes` untouched (no append) for `max_age_s` seconds.

        Each stream is checked and deleted atomically, so a stream appended to during the sweep
        survives it. Returns how many streams were deleted.
        """

    async def __aenter__(self: _S) -> _S:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
