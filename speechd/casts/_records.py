"""The records of a cast stream and the private records around it.

A cast stream holds, in order: one `meta`, then per attempt one `start` and that attempt's own
`audio` records, and at most one terminal `eos` or `error`. An `error` may be followed by a
`retry` (someone asked for the cast again) and a new attempt; `eos` is final forever. Nothing
else is interleaved after a `start`, so an attempt's own records are contiguous. Readers
ignore events they do not know (newer writers may add some).

**The playable sequence** (what every reader plays; `speechd.casts._playable` works it out):
attempt n's playable sequence is the first `keep` audio records of attempt n-1's playable
sequence (its `start` says how many), then attempt n's own audio records; the cast's is its
latest attempt's. A new attempt keeps every record the one before left (nothing is copied or
made again) unless the earlier audio cannot continue (its `start` names another model, encoder
or plan): then it keeps none. Each `start` also lists its kept records as seq spans (`kept`),
so a reader that has the latest `start` knows the whole sequence.

Header names (persisted, so keep them stable):

    e   event: meta | start | audio | eos | error | retry
    a   attempt number (decimal), on every record after meta
    i   the record's index in its attempt's playable sequence (decimal), audio only: dense from
        0 across kept and new records, so attempt n's first own record has i = its `keep`
    n   how long the playable sequence was expected to be when the record was written: i + 1 +
        the records still to come (decimal), audio only. An estimate while the plan is not done
        (casts are planned lazily; a live cast's text is not all there): `n == i + 1` holds on
        the record that ends the file, and on no other
    o   audio offset of the record's start in ms (decimal), audio only
    d   record duration in ms (decimal), audio only
    t   chunk text, UTF-8: the caption, published as the chunk is spoken; on a chunk's first
        record (a chunk longer than MAX_RECORD_S becomes several records; the others have "")
    w   the record's words with their times, JSON: `[[start_ms, end_ms, "text", [begin, end],
        "mark"], ...]`, ms from the record's own start, in order, within its `d`; `[begin,
        end)` is where the word is in the input as sent (characters; left out when unknown),
        and a named point (SSML `mark`) is an entry with no text and its name last; audio only,
        and only when the engine timed them (absent on older records and from engines without
        durations; older records' entries have the first three fields only)
    u   what each entry of `w` is: `word` (English) or `phrase` (G2Ps that read whole
        phrases); present exactly when `w` is
    p   where the record's chunk ends in the cast's plan: an opaque position, text (the
        incremental planner's `position`); audio only. A new attempt resumes the plan there.
    x   the seq of the `start` that opened the record's attempt (decimal): audio, eos, error
        and retry records, so a reader finds the latest `start` from the last record
    k   the resume checkpoint, text: what a new attempt needs to go on after this record (the
        worker's; opaque to readers, left out of public reads). Only on a record that ends its
        chunk: a new attempt keeps whole chunks only.
    h   the start hold in ms (decimal): on the first audio record of a playable sequence when
        the cast cannot be made in real time, how long after that record landed its listeners
        start playing, so that the rest plays without a stall (see `speechd.worker._hold`);
        absent (0) when the plan keeps ahead of its listeners. The listeners' clock starts at
        the record's timestamp plus its `h`.
    c   input records only (`input/<id>`, see `_input`): the characters of the live cast's
        input so far, this record's included (decimal)

Bodies of meta/start/eos/error/retry and every private record are JSON (msgspec Structs); new
fields always get defaults and types never change (schema evolution). Streams written before
`x`, `p`, `k` and `keep` existed read the same: their attempts keep nothing.

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
    "H_CHARS",
    "H_DURATION",
    "H_EVENT",
    "H_HOLD",
    "H_INDEX",
    "H_OFFSET",
    "H_PLAN",
    "H_PLANNED",
    "H_RESUME",
    "H_START",
    "H_TEXT",
    "H_UNIT",
    "H_WORDS",
    "PUBLIC_HEADERS",
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
    "RecordSpan",
    "Requeue",
    "Retry",
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
    "public_headers",
    "retry_record",
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
H_WORDS = b"w"
H_UNIT = b"u"
H_PLAN = b"p"
H_START = b"x"
H_RESUME = b"k"
H_HOLD = b"h"


PUBLIC_HEADERS = frozenset(
    {H_EVENT, H_ATTEMPT, H_INDEX, H_PLANNED, H_OFFSET, H_DURATION, H_TEXT, H_WORDS, H_UNIT}
    | {H_START, H_HOLD}
)
"""The headers of a cast stream's records that public reads carry (an allow-list): what a
player or client needs to place, caption and follow the audio. Every other header stays
private: the plan position `p` (offsets into, and a checksum of, the private text), the
resume checkpoint `k`, and whatever a later writer adds until it is named here."""


def public_headers(record: Record) -> list[tuple[bytes, bytes]]:
    """`record`'s headers that public reads carry (`PUBLIC_HEADERS`), in order."""
    return [(k, v) for k, v in record.headers if k in PUBLIC_HEADERS]


class Event(StrEnum):
    META = "meta"
    START = "start"
    AUDIO = "audio"
    EOS = "eos"
    ERROR = "error"
    RETRY = "retry"


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


class RecordSpan(msgspec.Struct, frozen=True, array_like=True):
    """`count` audio records at seqs `seq`, `seq + 1`, ...: indices `index` .. `index + count - 1`
    of a playable sequence (an earlier attempt's own records, contiguous in the stream)."""

    seq: int
    index: int
    count: int


class Start(msgspec.Struct, frozen=True):
    """Opens an attempt.

    `rtf`, `overhead_s` and `max_chunk_s` are the timing the chunk plan was made for (the
    worker's `PlanTiming`); an attempt that keeps earlier chunks plans with the same values, so
    its plan goes on where theirs ended.

    `keep` is how many records of the previous attempt's playable sequence this one keeps (the
    playable-sequence rule in the module docstring), and `kept` lists them as seq spans.
    `model`, `encoder` and `plan` name what decides whether earlier audio can continue: the
    model's fingerprint, the encoder's (format, settings, checkpoint version) and the plan's
    (chunk policy, timing, planner version); an attempt keeps nothing when any differs from the
    previous attempt's (or is empty: an attempt from before they existed).

    `origin_ms`: when the listeners' clock started, by the writer's wall clock: the first kept
    record's timestamp plus the start hold it states (`h`), or, for a cast made again after an
    `error`, when this attempt started (nobody was listening in between); 0 when nothing is
    kept (then the attempt's first own record's timestamp plus its `h` is the origin).

    `failures` counts the attempts before this one that ended in a failure of this cast.
    `chunk_failures` counts those that failed on the chunk this attempt starts with (in a row,
    nothing made in between), and `deaths` those of them in which the worker died with that
    chunk in flight (killed, crashed, lost its store): a death alone is never a verdict.
    """

    attempt: int
    worker: str
    chunks: int
    rtf: float | None = None
    failures: int = 0
    lease_ms: int = 0  # 0: written before leases; the worker's heartbeats stand for one
    overhead_s: float = 0.0
    max_chunk_s: float = 0.0
    keep: int = 0
    kept: list[RecordSpan] = []
    origin_ms: int = 0
    model: str = ""
    encoder: str = ""
    plan: str = ""
    chunk_failures: int = 0
    deaths: int = 0


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
    samples: int = 0
    """The playable sequence's length in samples (what an audiobook file is planned from);
    0 on an eos written before it was kept."""


class Failure(msgspec.Struct, frozen=True):
    message: str
    attempts: int


class Retry(msgspec.Struct, frozen=True):
    """Someone asked again for a cast that ended in `error` (after attempt `attempt`): a new
    attempt follows, keeping what can continue. Appended by the api, conditionally at the
    error's tail, so one request wins and enqueues the job."""

    attempt: int
    requested_ms: int


class Recipe(msgspec.Struct, frozen=True):
    """The private recipe in `catalog/<id>`: everything the worker needs to make the audio.

    A live cast (`live`) has no `text` here: it arrives in `input/<id>` (`_input`). Writing
    that input takes the token whose keyed digest is `input_key`; an input left idle for
    `idle_s` seconds is closed as if its writer had said it was done. `input_format` and
    `normalize` are how the text is read (the front end's; recipes written before them
    read as plain text, normalised)."""

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
    input_format: str = "text"
    """`text`, or `ssml`: `text` is an SSML document (never live)."""
    normalize: bool = True
    """False: the text is read as sent, without speechd's normalisation."""


class Requeue(msgspec.Struct, frozen=True):
    """After the recipe in `catalog/<id>`: a caller found the cast waiting, untouched for
    `STALE_QUEUED_S`, and looked in `jobs` for its job. `appended`: it had none (its creator
    died before appending it), and this caller appended one; else it was still in line.
    Appended at the catalog's tail as a claim, so one caller looks at a time, and the next
    look is `STALE_QUEUED_S` after this one. Readers of the recipe read only seq 0.

    Also (`appended`) what a caller writes before it appends a job for a recipe it found
    there, a retry's or a new life's of the cast (`_submit`): so a sweep that judged the
    cast gone spares its catalog."""

    requested_ms: int
    appended: bool


class Job(msgspec.Struct, frozen=True, omit_defaults=True):
    """One request to make cast `id`, in `jobs`.

    `at_once`: the request that appended it wants its first audio at once (`start: now`), so
    the worker may make the cast's first chunk while it still waits in line for capacity.
    Only the request that creates the cast (or makes a failed one again) appends a job; an
    identical request joining the cast later does not change it.

    `background`: made with the device's spare time only (a book's chapter): the worker
    admits it, and gives it a chunk, only when no listener's job waits and no listener needs
    the device (see docs/design/worker.md#background-work). `book`: the book it was appended
    for, so a `CancelBook` later in `jobs` skips it. A foreground job for the same cast (its
    listener opened it) promotes it to listener priority."""

    id: str
    at_once: bool = False
    background: bool = False
    book: str = ""


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
    heartbeat also names the chunk in flight (`cast`, and `chunk`: the index `i` its first
    audio record will get), and one is written as each chunk starts: if the worker dies, its
    last notice tells which cast and chunk it died on. `device` is the device as torch names
    it (`cpu`, `cuda:0`), `device_name` its model; every notice but `stopped` carries the
    worker's latest `telemetry` (speechd.telemetry) when it measures any.

    Before it is ready, a worker process says `loading` (every heartbeat period while it loads
    the model), and `unavailable` if the model cannot be loaded; `error` says why (on
    `unavailable`, and on a `loading` that retries after a failure). Notices written before
    `ready` repeat the `cast` and `chunk` of the life before, so its last words stay last. A
    `ready` notice lists in `unspeakable` the languages of its voices it cannot speak
    (language code -> why, e.g. a G2P package that is not installed).

    A ready worker's `state` says where its model is: "" held, `idle` given back after
    `--idle-unload` (the worker is ready all the same: the next cast wakes it), `waking` taking
    it again; `fallback` why it speaks on the CPU rather than the device it was asked for ("":
    it does not). Readers take both, and `device`, from the worker's latest notice.

    When the worker renders a batch (several casts' chunks in one pass), `cast` and `chunk`
    name its first item and `batch` the others (`[cast, chunk]` each): a death in flight is
    counted against every one of them. `max_batch` is the most items a batch holds there
    (`--max-batch`, or what `auto` measured; 1: no batches; 0: not said). `graph` is the
    decoder it speaks with (`--graph`, or what `auto` chose: "float", "fused", or "int8"
    on ONNX Runtime on a CPU; "": not said).
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
    state: str = ""
    fallback: str = ""
    batch: list[tuple[str, int]] = []
    max_batch: int = 0
    graph: str = ""


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


def _ended(start_seq: int) -> tuple[tuple[bytes, bytes], ...]:
    return ((H_START, _num(start_seq)),) if start_seq >= 0 else ()


def eos_record(attempt: int, eos: Eos, start_seq: int = -1) -> AppendRecord:
    headers = ((H_EVENT, b"eos"), (H_ATTEMPT, _num(attempt)), *_ended(start_seq))
    return AppendRecord(encode(eos), headers)


def error_record(attempt: int, failure: Failure, start_seq: int = -1) -> AppendRecord:
    headers = ((H_EVENT, b"error"), (H_ATTEMPT, _num(attempt)), *_ended(start_seq))
    return AppendRecord(encode(failure), headers)


def retry_record(retry: Retry, start_seq: int = -1) -> AppendRecord:
    headers = ((H_EVENT, b"retry"), (H_ATTEMPT, _num(retry.attempt)), *_ended(start_seq))
    return AppendRecord(encode(retry), headers)


class Word(msgspec.Struct, frozen=True, array_like=True):
    """A word (or phrase) of an audio record: ms from the record's start, its text, and where
    it is in the input as sent (`source`: characters [begin, end), None when unknown); a mark
    (SSML's named point) has no text, start == end and its name in `mark`. Stored as
    `[start_ms, end_ms, text, source, mark]` in the `w` header (array-like: fields only ever
    appended; trailing defaults left out)."""

    start_ms: int
    end_ms: int
    text: str
    source: tuple[int, int] | None = None
    mark: str = ""


class AudioChunk(msgspec.Struct, frozen=True):
    """The parsed headers of an audio record (and its body). `index` is `i`: the record's
    place in its attempt's playable sequence. `plan`, `start_seq` and `resume` are `p`, `x`
    and `k` ("", -1 and b"" on records written before them; `resume` is b"" too on a record
    that does not end its chunk). `words` and `unit` are empty when the record has no `w`
    header (or one that does not parse). `hold_ms` is `h` (0 without one)."""

    attempt: int
    index: int
    planned: int
    offset_ms: int
    duration_ms: int
    text: str
    body: bytes = b""
    words: tuple[Word, ...] = ()
    unit: str = ""
    plan: str = ""
    start_seq: int = -1
    resume: bytes = b""
    hold_ms: int = 0


_words_decoder = msgspec.json.Decoder(tuple[Word, ...])


def audio_record(chunk: AudioChunk) -> AppendRecord:
    headers = [
        (H_EVENT, b"audio"),
        (H_ATTEMPT, _num(chunk.attempt)),
        (H_INDEX, _num(chunk.index)),
        (H_PLANNED, _num(chunk.planned)),
        (H_OFFSET, _num(chunk.offset_ms)),
        (H_DURATION, _num(chunk.duration_ms)),
        (H_TEXT, chunk.text.encode()),
    ]
    if chunk.words:
        rows = [_word_row(word) for word in chunk.words]
        headers += [(H_WORDS, msgspec.json.encode(rows)), (H_UNIT, chunk.unit.encode())]
    if chunk.plan:
        headers.append((H_PLAN, chunk.plan.encode()))
    if chunk.start_seq >= 0:
        headers.append((H_START, _num(chunk.start_seq)))
    if chunk.resume:
        headers.append((H_RESUME, chunk.resume))
    if chunk.hold_ms > 0:
        headers.append((H_HOLD, _num(chunk.hold_ms)))
    return AppendRecord(chunk.body, tuple(headers))


def _word_row(word: Word) -> list[object]:
    """A word as its `w` entry: trailing defaults left out (msgspec writes every field of an
    array-like struct), so a word with neither source nor mark is `[start, end, text]`."""
    row: list[object] = [word.start_ms, word.end_ms, word.text]
    if word.source is not None or word.mark:
        row.append(word.source)
    if word.mark:
        row.append(word.mark)
    return row


def audio_chunk(record: Record) -> AudioChunk:
    headers = dict(record.headers)
    words: tuple[Word, ...] = ()
    raw = headers.get(H_WORDS)
    if raw:
        try:
            words = _words_decoder.decode(raw)
        except msgspec.DecodeError:
            words = ()  # a record's audio stays readable whatever its words header holds
    start = headers.get(H_START)
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
        plan=headers.get(H_PLAN, b"").decode(),
        start_seq=int(start) if start is not None else -1,
        resume=headers.get(H_RESUME, b""),
        hold_ms=_hold(headers.get(H_HOLD)),
    )


def _hold(value: bytes | None) -> int:
    """`h` as ms; 0 when absent or not a number (a record stays readable whatever it holds)."""
    if not value:
        return 0
    try:
        return max(int(value), 0)
    except ValueError:
        return 0
