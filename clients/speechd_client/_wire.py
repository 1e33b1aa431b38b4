"""What speechd answers, as msgspec Structs (mirrors of the server's wire shapes, never imports
of them: the client must not need the server installed). Unknown fields are ignored, so a
newer server that adds some still decodes."""

from __future__ import annotations

import base64
from typing import Any, Literal

import msgspec

__all__ = [
    "FORMATS",
    "AudioFormat",
    "CastCreated",
    "CastRecord",
    "CastView",
    "InputAccepted",
    "LiveCastCreated",
    "Progress",
    "RecordView",
    "RecordsPage",
    "RecordsView",
    "Start",
    "Voice",
    "VoiceList",
    "records_page",
]

AudioFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]
FORMATS: tuple[AudioFormat, ...] = ("mp3", "opus", "aac", "flac", "wav", "pcm")
Start = Literal["smooth", "now"]
"""When streamed speech starts: held back until it can play through ("smooth"), or at once."""

TERMINAL_EVENTS = frozenset({"eos", "error"})


class _WordRow(msgspec.Struct, array_like=True, frozen=True):
    """One entry of an audio record's `w` header (fields only ever appended)."""

    start_ms: int
    end_ms: int
    text: str
    source: tuple[int, int] | None = None
    mark: str = ""


class Voice(msgspec.Struct, frozen=True):
    id: str
    name: str


class VoiceList(msgspec.Struct, frozen=True):
    voices: list[Voice]


class CastCreated(msgspec.Struct, frozen=True):
    """`POST /v1/casts`: the cast's id, its player link and its state then."""

    id: str
    url: str
    status: str


class LiveCastCreated(msgspec.Struct, frozen=True):
    """`POST /v1/casts` with `live`: the cast, and where and how its input is written."""

    id: str
    url: str
    status: str
    input_url: str
    input_token: str


class InputAccepted(msgspec.Struct, frozen=True):
    """A live cast's input after an append: `seq` pieces, `chars` characters, `done`."""

    id: str
    seq: int
    chars: int
    done: bool


class Progress(msgspec.Struct, frozen=True):
    chunks_done: int
    chunks_planned: int | None
    audio_seconds: float
    lead_seconds: float | None
    """Seconds of audio a listener who started at the first chunk still has buffered."""
    queue_position: int | None = None
    """A queued cast's place in line: waiting casts ahead of it (0: it starts next)."""
    starts_in_seconds: float | None = None
    """A queued or loading cast's estimated wait until it starts (None: the server cannot
    tell)."""
    hold_seconds: float = 0.0
    """How long after its first audio its listeners start, so that the rest plays without a
    stall (a device slower than real time; 0: at once)."""
    plays_in_seconds: float | None = None
    """While that hold still runs: seconds until its listeners start hearing it."""


class BookChapter(msgspec.Struct, frozen=True):
    """One chapter of a book: its number (from 1), title, length in characters, the cast that
    speaks it, whether it was chosen, its state (queued, generating, done, failed, or
    not_made), and the voice and speed it is read in."""

    number: int
    title: str
    chars: int
    cast: str
    chosen: bool
    state: str
    audio_ms: int = 0
    voice: str = ""
    speed: float = 1.0


class BookView(msgspec.Struct, frozen=True):
    """`GET /v1/books/{id}`: a book and its chapters. `state`: queued, generating, done,
    failed or cancelled; `progress` 0..1 of the chosen chapters' text; `eta_s` the seconds
    the rest should take (None: not known)."""

    id: str
    state: str
    title: str
    author: str
    format: str
    progress: float
    chapters: list[BookChapter]
    eta_s: float | None = None
    created: bool = False

    @property
    def finished(self) -> bool:
        return self.state in ("done", "failed", "cancelled")


class CastView(msgspec.Struct, frozen=True):
    """`GET /v1/casts/{id}`: a cast's public facts and progress (never its text)."""

    id: str
    url: str
    status: str
    """queued, loading (the server's model is being taken again), generating, done or
    failed"""
    title: str
    voice: str
    speed: float
    format: str
    model: str
    sample_rate: int
    created: int
    attempt: int
    progress: Progress
    error: str | None
    audio_url: str
    records_url: str
    events_url: str
    captions_url: str = ""
    """The cast's WebVTT subtitles ("" from a server without word timing)."""
    words_url: str = ""
    retryable: bool = False
    """A failed cast that the same request makes again (keeping the audio made so far)."""

    @property
    def finished(self) -> bool:
        return self.status in ("done", "failed")


class CastRecord(msgspec.Struct, frozen=True):
    """One record of a cast stream (meta, start, audio..., then eos or error).

    What plays is the latest `start`'s playable sequence: the earlier records it keeps (its
    body's `keep` and `kept`: [seq, index, count] spans), then its own audio records."""

    seq_num: int
    timestamp: int
    headers: dict[str, str]
    body: bytes

    @property
    def event(self) -> str:
        return self.headers.get("e", "")

    @property
    def terminal(self) -> bool:
        return self.event in TERMINAL_EVENTS

    @property
    def attempt(self) -> int:
        return int(self.headers.get("a", "0"))

    @property
    def index(self) -> int | None:
        """An audio record's index in its attempt's playable sequence."""
        return _int(self.headers.get("i"))

    @property
    def planned(self) -> int | None:
        """Chunks planned for the attempt (audio records)."""
        return _int(self.headers.get("n"))

    @property
    def duration_ms(self) -> int | None:
        return _int(self.headers.get("d"))

    @property
    def text(self) -> str | None:
        """An audio record's caption: the text the chunk speaks."""
        return self.headers.get("t")

    @property
    def words(self) -> list[tuple[int, int, str]]:
        """An audio record's words (or phrases, see `unit`) as (start_ms, end_ms, text), ms
        from the record's own start; [] when the record has none. SSML marks are left out
        (`entries` has them, and each word's place in the text as sent)."""
        return [(start, end, text) for start, end, text, _, mark in self.entries if not mark]

    @property
    def entries(self) -> list[tuple[int, int, str, tuple[int, int] | None, str]]:
        """Each entry of the `w` header as (start_ms, end_ms, text, source, mark): `source` is
        where the word is in the input as sent, [begin, end) characters (None when the server
        did not say), `mark` an SSML mark's name ("" for a word). [] without words."""
        raw = self.headers.get("w")
        if not raw:
            return []
        try:
            rows = msgspec.json.decode(raw, type=list[_WordRow])
        except msgspec.DecodeError:
            return []
        return [(r.start_ms, r.end_ms, r.text, r.source, r.mark) for r in rows]

    @property
    def unit(self) -> str | None:
        """What `words` holds: "word" or "phrase" (None without words)."""
        return self.headers.get("u")

    def json(self) -> Any:
        """The body of a meta, start, eos or error record."""
        return msgspec.json.decode(self.body)


class RecordsPage(msgspec.Struct, frozen=True):
    records: list[CastRecord]
    tail: int
    """The stream's length when read: records past the last one here are still to come."""


def _int(value: str | None) -> int | None:
    return None if value is None else int(value)


class RecordView(msgspec.Struct, frozen=True):
    """A record as the server sends it (the body in base64)."""

    seq_num: int
    timestamp: int
    headers: list[tuple[str, str]]
    body: str


class RecordsView(msgspec.Struct, frozen=True):
    records: list[RecordView]
    tail: int


def records_page(view: RecordsView) -> RecordsPage:
    return RecordsPage(
        [
            CastRecord(r.seq_num, r.timestamp, dict(r.headers), base64.b64decode(r.body))
            for r in view.records
        ],
        view.tail,
    )
