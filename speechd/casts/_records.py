"""The records of a cast stream and the private records around it.

A cast stream holds, in order: one `meta`, then per attempt one `start`, that attempt's `audio`
records (chunk 0, 1, ... in order), and at most one terminal `eos` or `error`. Nothing else is
interleaved after a `start`, so a record's position tells where its attempt began. Readers
ignore events they do not know (newer writers may add some).

Header names (persisted, so keep them stable):

    e   event: meta | start | audio | eos | error
    a   attempt number (decimal), on every record after meta
    i   chunk index (decimal), audio only
    n   chunks planned for the attempt (decimal), audio only
    o   audio offset of the chunk's start in ms (decimal), audio only
    d   chunk duration in ms (decimal), audio only
    t   chunk text, UTF-8: the caption, published as the chunk is spoken
    c   input records only (`input/<id>`, see `_input`): the characters of the live cast's
        input so far, this record's included (decimal)

Bodies of meta/start/eos/error and every private record are JSON (msgspec Structs); new
fields always get defaults and types never change (schema evolution).

Leases: a `start` carries its worker's lease on the cast (`lease_ms`). The attempt stays that
worker's while it appends to the cast or renews the lease at least every `lease_ms`; renewals
are `Lease` records in the private stream `leases/<id>` (never in the cast stream, whose
layout above stays as it is). A cast whose latest attempt's lease ran out, and that has no
terminal record, may be taken over with a new attempt.
"""

from __future__ import annotations

from typing import TypeVar

import msgspec

from speechd._compat import StrEnum
from speechd.durable import AppendRecord, Record

__all__ = [
    "H_ATTEMPT",
    "H_CHARS",
    "H_DURATION",
    "H_EVENT",
    "H_INDEX",
    "H_OFFSET",
    "H_PLANNED",
    "H_TEXT",
    "AudioChunk",
    "Cursor",
    "DeadJob",
    "Eos",
    "Event",
    "Failure",
    "Job",
    "Lease",
    "Meta",
    "Receipt",
    "Recipe",
    "Start",
    "WorkerNotice",
    "audio_chunk",
    "audio_record",
    "decode",
    "encode",
    "eos_record",
    "error_record",
    "event_of",
    "meta_record",
    "start_record",
]

T = TypeVar("T")

H_EVENT = b"e"
H_ATTEMPT = b"a"
H_INDEX = b"i"
H_PLANNED = b"n"
H_OFFSET = b"o"
H_DURATION = b"d"
H_TEXT = b"t"
H_CHARS = b"c"


class Event(StrEnum):
    META = "meta"
    START = "start"
    AUDIO = "audio"
    EOS = "eos"
    ERROR = "error"


class Meta(msgspec.Struct, frozen=True):
    """Public facts about a cast (never its full text)."""

    model: str
    voice: str
    speed: float
    format: str
    sample_rate: int
    title: str
    created_ms: int
    text_chars: int
    live: bool = False
    """The text arrives over time (`input/<id>`); `text_chars` is then what came with the
    request that made the cast (often 0)."""


class Start(msgspec.Struct, frozen=True):
    """Opens an attempt. `rtf`, `overhead_s` and `max_chunk_s` are the timing the chunk plan
    was made for (the worker's `PlanTiming`): a later attempt plans with the same values, so its
    chunks (and audio) match this one's. `failures` counts the attempts before this one that
    ended in a failure of this cast."""

    attempt: int
    worker: str
    chunks: int
    rtf: float | None = None
    failures: int = 0
    lease_ms: int = 0  # 0: written before leases; the worker's heartbeats stand for one
    overhead_s: float = 0.0
    max_chunk_s: float = 0.0


class Lease(msgspec.Struct, frozen=True):
    """A renewal of `worker`'s lease on `attempt` of a cast, in `leases/<id>`; the record's
    timestamp is when it was renewed, and it holds for `lease_ms` from then."""

    attempt: int
    worker: str
    lease_ms: int


class Eos(msgspec.Struct, frozen=True):
    chunks: int
    audio_ms: int
    gen_ms: int


class Failure(msgspec.Struct, frozen=True):
    message: str
    attempts: int


class Recipe(msgspec.Struct, frozen=True):
    """The private recipe in `catalog/<id>`: everything the worker needs to make the audio.

    A live cast (`live`) has no `text` here: it arrives in `input/<id>` (`_input`). Writing
    that input takes the token whose keyed digest is `input_key`; an input left idle for
    `idle_s` seconds is closed as if its writer had said it was done."""

    text: str
    model: str
    voice: str
    speed: float
    format: str
    title: str
    created_ms: int
    live: bool = False
    input_key: str = ""
    idle_s: float = 0.0


class Job(msgspec.Struct, frozen=True):
    id: str


class Cursor(msgspec.Struct, frozen=True):
    offset: int


class Receipt(msgspec.Struct, frozen=True):
    """One finished cast in `progress/done`."""

    id: str
    attempt: int
    worker: str
    chunks: int
    audio_ms: int
    gen_ms: int
    xrt: float


class DeadJob(msgspec.Struct, frozen=True):
    id: str
    error: str
    attempts: int


class WorkerNotice(msgspec.Struct, frozen=True):
    """A worker's announcement in `workers/<id>`: ready, heartbeat or stopped.

    `heartbeat_ms` is the worker's heartbeat period, so readers judge freshness by it. A
    heartbeat also names the chunk in flight (`cast`, and `chunk`: the audio record it will
    become), and one is written as each chunk starts: if the worker dies, its last notice
    tells which cast killed it.
    """

    kind: str
    worker: str
    time_ms: int
    voices: list[str] = []
    device: str = ""
    pid: int = 0
    heartbeat_ms: int = 5000
    cast: str = ""
    chunk: int = -1


def encode(value: msgspec.Struct) -> bytes:
    return msgspec.json.encode(value)


def decode(body: bytes, kind: type[T]) -> T:
    return msgspec.json.decode(body, type=kind)


def event_of(record: Record) -> str | None:
    value = record.header(H_EVENT)
    return value.decode() if value is not None else None


def _num(value: int) -> bytes:
    return str(value).encode()


def meta_record(meta: Meta) -> AppendRecord:
    return AppendRecord(encode(meta), ((H_EVENT, b"meta"),))


def start_record(start: Start) -> AppendRecord:
    return AppendRecord(encode(start), ((H_EVENT, b"start"), (H_ATTEMPT, _num(start.attempt))))


def eos_record(attempt: int, eos: Eos) -> AppendRecord:
    return AppendRecord(encode(eos), ((H_EVENT, b"eos"), (H_ATTEMPT, _num(attempt))))


def error_record(attempt: int, failure: Failure) -> AppendRecord:
    return AppendRecord(encode(failure), ((H_EVENT, b"error"), (H_ATTEMPT, _num(attempt))))


class AudioChunk(msgspec.Struct, frozen=True):
    """The parsed headers of an audio record (and its body)."""

    attempt: int
    index: int
    planned: int
    offset_ms: int
    duration_ms: int
    text: str
    body: bytes = b""


def audio_record(chunk: AudioChunk) -> AppendRecord:
    return AppendRecord(
        chunk.body,
        (
            (H_EVENT, b"audio"),
            (H_ATTEMPT, _num(chunk.attempt)),
            (H_INDEX, _num(chunk.index)),
            (H_PLANNED, _num(chunk.planned)),
            (H_OFFSET, _num(chunk.offset_ms)),
            (H_DURATION, _num(chunk.duration_ms)),
            (H_TEXT, chunk.text.encode()),
        ),
    )


def audio_chunk(record: Record) -> AudioChunk:
    headers = dict(record.headers)
    return AudioChunk(
        attempt=int(headers[H_ATTEMPT]),
        index=int(headers[H_INDEX]),
        planned=int(headers[H_PLANNED]),
        offset_ms=int(headers[H_OFFSET]),
        duration_ms=int(headers[H_DURATION]),
        text=headers[H_TEXT].decode(),
        body=record.body,
    )
