"""The stream store contract: records, the async `Store` interface, and its errors.

Errors:

    DurableError
    ├── InvalidStreamName      the name is empty, too long, or malformed
    ├── RecordTooLarge         a record or batch is over the store's `limits`
    ├── SeqMismatch            a conditional append found another next seq (`.next_seq`)
    ├── SeqOutOfRange          a read or trim outside `[first, tail]` (`.first`, `.tail`)
    └── StoreClosed            the store was used after `close()`

Semantics every backend keeps (the conformance suite in tests/durable checks them):

* A stream springs into existence at its first append; a missing stream reads exactly like an
  empty one (`check_tail` is 0, `read` from 0 returns nothing or waits), so `match_seq_num=0`
  is a claim: it succeeds for exactly one appender.
* `seq_num`s are dense from 0. An append is atomic for its whole batch and durable once acked.
* `read` at the tail returns no records (after waiting up to `wait` seconds for one); `read`
  past the tail raises `SeqOutOfRange`. A read returns at least one record when any is
  available, even if that record alone is over `max_bytes`.
* **Trim.** `trim(stream, before_seq)` drops the records below `before_seq`: the stream's
  *first* seq becomes `before_seq` (it never goes back: a lower `before_seq` changes nothing),
  its tail and every seq stay as they were, and appends carry on at the tail. Trimming is not
  an append: it neither touches the stream for retention nor creates a missing one. Once it
  returns, no read returns a record below `before_seq`. A `before_seq` past the tail raises
  `SeqOutOfRange` and trims nothing. A long poll waiting at the tail is not disturbed.
* **The out-of-range outcome.** A read below the first seq (a trimmed-away record) or past
  the tail raises `SeqOutOfRange`; `.first` and `.tail` say where the stream's records are,
  so `seq_num < .first` means "trimmed, resume from `.first`" and `seq_num > .tail` means
  "past the end". A missing stream has first 0 and tail 0.
* `delete` removes a stream; a later append starts it again from seq 0 (and first 0). A read
  waiting past the new tail of a deleted stream ends with `SeqOutOfRange`, so a follower
  learns of it.
* **Limits.** Each store reports what it accepts in `limits` (a `Limits`): the largest record
  (`record_size`: body plus header names and values), the most headers per record, the
  largest batch in records and bytes. A store behind a server reports what that server takes
  (the NATS backend: its `max_payload` and atomic-batch size), never more than the maxima
  here. A batch over a limit raises `RecordTooLarge` and writes nothing; `Limits.batches`
  splits records into appends that fit.
* A record's body and header names and values are `bytes`; anything else is a `TypeError`,
  raised before anything of the batch is written.
* **Reads without bodies.** `read(..., bodies=False)` returns the same records with each
  `body` left out (`b""`) and its length in `omitted` (`Record.body_size` either way), for
  readers that need only headers (a cast's words, a file's layout); `max_bytes` then counts
  headers only. The embedded store never reads the bodies from disk; the NATS backend's server
  sends them anyway (a direct get cannot leave part of a message out), and the handle drops
  them as it decodes, so there the saving is the reader's memory, not the wire.
"""

from __future__ import annotations

import abc
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from typing import TypeVar

import msgspec

__all__ = [
    "CONTRACT_LIMITS",
    "MAX_BATCH_BYTES",
    "MAX_BATCH_RECORDS",
    "MAX_BODY_BYTES",
    "MAX_HEADERS",
    "MAX_HEADER_BYTES",
    "MAX_NAME_BYTES",
    "SWEEP_PAGE",
    "AppendAck",
    "AppendRecord",
    "DurableError",
    "InvalidStreamName",
    "Limits",
    "ReadBatch",
    "Record",
    "RecordTooLarge",
    "SeqMismatch",
    "SeqOutOfRange",
    "Spare",
    "Store",
    "StoreClosed",
    "StreamInfo",
    "check_batch",
    "record_size",
    "validate_name",
]

# The contract's maxima: no store accepts more, a store behind a server may accept less (its
# `limits` say).
MAX_NAME_BYTES = 512
MAX_BODY_BYTES = 1024 * 1024
MAX_HEADER_BYTES = 64 * 1024  # header names and values of one record, together
MAX_HEADERS = 128  # header pairs per record
MAX_BATCH_RECORDS = 1000
MAX_BATCH_BYTES = 8 * 1024 * 1024

Headers = tuple[tuple[bytes, bytes], ...]


class Record(msgspec.Struct, frozen=True):
    """One stored record. `timestamp` is milliseconds since the epoch, set by the store."""

    seq_num: int
    timestamp: int
    headers: Headers
    body: bytes
    omitted: int = 0
    """The length of the body a read without bodies left out (`body` is then `b""`); 0 when
    the body is here."""

    @property
    def body_size(self) -> int:
        """The stored body's length, whether this read carried it or not."""
        return self.omitted or len(self.body)

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
    """A stream as `list` sees it: its tail, its last append's time, and its first seq."""

    name: str
    next_seq: int
    touched_ms: int
    first_seq: int = 0


def record_size(record: AppendRecord | Record) -> int:
    """What a record weighs against the limits: its body plus its header names and values."""
    return len(record.body) + sum(len(k) + len(v) for k, v in record.headers)


class Limits(msgspec.Struct, frozen=True):
    """What one store accepts; see `Store.limits`.

    `max_record_bytes` bounds `record_size` of one record; `max_body_bytes` and
    `max_header_bytes` bound its parts alone, `max_headers` its header pairs. A batch holds
    at most `max_batch_records` records weighing `max_batch_bytes` together.
    """

    max_record_bytes: int
    max_batch_records: int
    max_batch_bytes: int
    max_body_bytes: int = MAX_BODY_BYTES
    max_header_bytes: int = MAX_HEADER_BYTES
    max_headers: int = MAX_HEADERS

    def batches(self, records: Sequence[AppendRecord]) -> list[list[AppendRecord]]:
        """`records` split, in order, into as few consecutive appends as fit these limits.

        Raises `RecordTooLarge` (before anything is split) if one record alone is over them.
        """
        batches: list[list[AppendRecord]] = []
        current: list[AppendRecord] = []
        size = 0
        for record in records:
            weight = _check_record(record, self)
            if current and (
                len(current) >= self.max_batch_records or size + weight > self.max_batch_bytes
            ):
                batches.append(current)
                current, size = [], 0
            current.append(record)
            size += weight
        if current:
            batches.append(current)
        return batches


CONTRACT_LIMITS = Limits(
    max_record_bytes=MAX_BODY_BYTES + MAX_HEADER_BYTES,
    max_batch_records=MAX_BATCH_RECORDS,
    max_batch_bytes=MAX_BATCH_BYTES,
)
"""The contract's maxima as `Limits`: what the embedded store accepts."""


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
    """A read (or trim) at `seq_num`, outside the stream's records: below `first` (trimmed
    away) or past `tail`."""

    def __init__(self, stream: str, seq_num: int, tail: int, first: int = 0) -> None:
        where = (
            f"below the first seq {first} (trimmed)" if seq_num < first else f"past the tail {tail}"
        )
        super().__init__(f"{stream}: seq {seq_num} is {where}")
        self.stream = stream
        self.seq_num = seq_num
        self.tail = tail
        self.first = first


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


def _check_record(record: AppendRecord, limits: Limits) -> int:
    """Check one record's types and limits; return its `record_size`."""
    _check_types(record)
    if len(record.body) > limits.max_body_bytes:
        raise RecordTooLarge(f"a record body holds at most {limits.max_body_bytes} bytes")
    if len(record.headers) > limits.max_headers:
        raise RecordTooLarge(f"a record holds at most {limits.max_headers} headers")
    header_bytes = sum(len(k) + len(v) for k, v in record.headers)
    if header_bytes > limits.max_header_bytes:
        raise RecordTooLarge(f"a record's headers hold at most {limits.max_header_bytes} bytes")
    size = len(record.body) + header_bytes
    if size > limits.max_record_bytes:
        raise RecordTooLarge(
            f"a record (body and headers) holds at most {limits.max_record_bytes} bytes here"
        )
    return size


def check_batch(records: Sequence[AppendRecord], limits: Limits = CONTRACT_LIMITS) -> int:
    """Validate a batch's types and limits; return its size in bytes.

    Raises `TypeError` for a record that is not bytes where bytes belong, `RecordTooLarge` for
    one over the limits; either way, nothing of the batch is written.
    """
    if not records:
        raise RecordTooLarge("an append needs at least one record")
    if len(records) > limits.max_batch_records:
        raise RecordTooLarge(f"a batch holds at most {limits.max_batch_records} records here")
    total = sum(_check_record(record, limits) for record in records)
    if total > limits.max_batch_bytes:
        raise RecordTooLarge(f"a batch holds at most {limits.max_batch_bytes} bytes here")
    return total


_S = TypeVar("_S", bound="Store")

SWEEP_PAGE = 256
"""The most expired stream names a sweep hands its `spare` at once."""

Spare = Callable[[list[str]], Awaitable[Collection[str]]]
"""A sweep's `spare`: given expired stream names, the ones to keep (see `Store.sweep`)."""


class Store(abc.ABC):
    """An async stream store. Open one per event loop; close it when done."""

    @property
    @abc.abstractmethod
    def limits(self) -> Limits:
        """What this store accepts (fixed while it is open)."""

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
        bodies: bool = True,
    ) -> ReadBatch:
        """Records from `seq_num`; at the tail, wait up to `wait` seconds for one to land.

        With `bodies=False`, each record's body is left out (its length in `omitted`) and
        `max_bytes` counts headers only."""

    @abc.abstractmethod
    async def check_tail(self, stream: str) -> int:
        """The stream's next seq (0 for a missing stream)."""

    @abc.abstractmethod
    async def trim(self, stream: str, before_seq: int) -> int:
        """Drop `stream`'s records below `before_seq`; return its first seq afterwards.

        Seqs stay as they were; a lower `before_seq` than the first changes nothing; one past
        the tail raises `SeqOutOfRange`. Reads below the first seq raise `SeqOutOfRange`.
        """

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
        """Yield the records from `seq_num` on, then live ones as they land, until cancelled.

        Raises `SeqOutOfRange` when the stream is deleted under it, or trimmed past the record
        it would read next (a follower at the tail is never trimmed past).
        """
        while True:
            batch = await self.read(stream, seq_num, wait=30.0)
            for record in batch.records:
                yield record
            if batch.records:
                seq_num = batch.records[-1].seq_num + 1

    @abc.abstractmethod
    async def sweep(
        self, max_age_s: float, prefixes: Sequence[str], *, spare: Spare | None = None
    ) -> int:
        """Delete streams under `prefixes` untouched (no append) for `max_age_s` seconds.

        Each stream is checked and deleted atomically, and only as it was when it was listed:
        a stream appended to during the sweep (while `spare` judges its page, say), or deleted
        and started again, survives it. The work goes in bounded steps, so appends (of any
        process) are never kept waiting behind a whole sweep. `spare`, if given, is asked
        about the expired streams a page at a time (at most `SWEEP_PAGE` names) before any of
        them goes, and the names it returns are kept this time (a caller whose streams live
        and die together, like a cast's, keeps a stream whose siblings are still in use).
        Returns how many streams were deleted.
        """

    async def __aenter__(self: _S) -> _S:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
