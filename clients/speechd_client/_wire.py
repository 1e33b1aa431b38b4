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
    "Voice",
    "VoiceList",
    "records_page",
]

AudioFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]
FORMATS: tuple[AudioFormat, ...] = ("mp3", "opus", "aac", "flac", "wav", "pcm")

TERMINAL_EVENTS = frozenset({"eos", "error"})


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


class CastView(msgspec.Struct, frozen=True):
    """`GET /v1/casts/{id}`: a cast's public facts and progress (never its text)."""

    id: str
    url: str
    status: str
    """queued, generating, done or failed"""
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

    @property
    def finished(self) -> bool:
        return self.status in ("done", "failed")


class CastRecord(msgspec.Struct, frozen=True):
    """One record of a cast stream (meta, start, audio..., then eos or error).

    The latest `start` opens the playable attempt; audio of earlier attempts is superseded."""

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
        """An audio record's chunk index."""
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
