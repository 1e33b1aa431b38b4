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
    w   the record's words with their times, JSON: `[[start_ms, end_ms, "text"], ...]`, ms
        from the record's own start, in order, within its `d`; audio only, and only when the
        engine timed them (absent on older records and from engines without durations)
    u   what each entry of `w` is: `word` (English) or `phrase` (G2Ps that read whole
        phrases); present exactly when `w` is

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
from speechd.telemetry import Readings

__all__ = [
    "H_ATTEMPT",
    "H_DURATION",
    "H_EVENT",
    "H_INDEX",
    "H_OFFSET",
    "H_PLANNED",
    "H_TEXT",
    "H_UNIT",
    "H_WORDS",
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
    "Word",
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
H_WORDS = b"w"
H_UNIT = b"u"


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
    """The private recipe in `catalog/<id>`: everything the worker needs to make the audio."""

    text: str
    model: str
    voice: str
    speed: float
    format: str
    title: str
    created_ms: int


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
    """A worker's announcement in `workers/<id>`: ready, heartbeat, stopped, loading or
    unavailable.

    `heartbeat_ms` is the worker's heartbeat period, so readers judge freshness by it. A
    heartbeat also names the chunk in flight (`cast`, and `chunk`: the audio record it will
    become), and one is written as each chunk starts: if the worker dies, its last notice
    tells which cast killed it. `device` is the device as torch names it (`cpu`, `cuda:0`),
    `device_name` its model; every notice but `stopped` carries the worker's latest
    `telemetry` (speechd.telemetry) when it measures any.

    Before it is ready, a worker process says `loading` (every heartbeat period while it loads
    the model), and `unavailable` if the model cannot be loaded; `error` says why (on
    `unavailable`, and on a `loading` that retries after a failure). Notices written before
    `ready` repeat the `cast` and `chunk` of the life before, so its last words stay last. A
    `ready` notice lists in `unspeakable` the languages of its voices it cannot speak
    (language code -> why, e.g. a G2P package that is not installed).
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
    error: str = ""
    unspeakable: dict[str, str] = {}
    device_name: str = ""
    telemetry: Readings | None = None


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


class Word(msgspec.Struct, frozen=True, array_like=True):
    """A word (or phrase) of an audio record: ms from the record's start, and its text. Stored
    as `[start_ms, end_ms, text]` in the `w` header (array-like: fields only ever appended)."""

    start_ms: int
    end_ms: int
    text: str


class AudioChunk(msgspec.Struct, frozen=True):
    """The parsed headers of an audio record (and its body). `words` and `unit` are empty
    when the record has no `w` header (or one that does not parse)."""

    attempt: int
    index: int
    planned: int
    offset_ms: int
    duration_ms: int
    text: str
    body: bytes = b""
    words: tuple[Word, ...] = ()
    unit: str = ""


_words_decoder = msgspec.json.Decoder(tuple[Word, ...])


def audio_record(chunk: AudioChunk) -> AppendRecord:
    headers: tuple[tuple[bytes, bytes], ...] = (
        (H_EVENT, b"audio"),
        (H_ATTEMPT, _num(chunk.attempt)),
        (H_INDEX, _num(chunk.index)),
        (H_PLANNED, _num(chunk.planned)),
        (H_OFFSET, _num(chunk.offset_ms)),
        (H_DURATION, _num(chunk.duration_ms)),
        (H_TEXT, chunk.text.encode()),
    )
    if chunk.words:
        headers += ((H_WORDS, msgspec.json.encode(chunk.words)), (H_UNIT, chunk.unit.encode()))
    return AppendRecord(chunk.body, headers)


def audio_chunk(record: Record) -> AudioChunk:
    headers = dict(record.headers)
    words: tuple[Word, ...] = ()
    raw = headers.get(H_WORDS)
    if raw:
        try:
            words = _words_decoder.decode(raw)
        except msgspec.DecodeError:
            words = ()  # a record's audio stays readable whatever its words header holds
    return AudioChunk(
        attempt=int(headers[H_ATTEMPT]),
        index=int(headers[H_INDEX]),
        planned=int(headers[H_PLANNED]),
        offset_ms=int(headers[H_OFFSET]),
        duration_ms=int(headers[H_DURATION]),
        text=headers[H_TEXT].decode(),
        body=record.body,
        words=words,
        unit=headers.get(H_UNIT, b"").decode("utf-8", "replace") if words else "",
    )
