"""Wire shapes of the cast API and the public read path (msgspec Structs), and conversions."""

from __future__ import annotations

import base64
import re
from typing import Annotated, Literal

import msgspec

from speechd.casts import CastStatus
from speechd.durable import Record

__all__ = [
    "CastCreated",
    "CastView",
    "NewCast",
    "Progress",
    "RecordView",
    "RecordsPage",
    "cast_view",
    "derive_title",
    "record_view",
]

AudioFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]  # speechd.audio.FORMATS

TITLE_CHARS = 80


class NewCast(msgspec.Struct, frozen=True, kw_only=True):
    """`POST /v1/casts`. The input's upper bound is `GatewaySettings.max_input_chars`."""

    input: Annotated[str, msgspec.Meta(min_length=1)]
    voice: str | None = None
    speed: Annotated[float, msgspec.Meta(ge=0.25, le=4.0)] = 1.0
    response_format: AudioFormat = "mp3"
    model: str | None = None
    title: Annotated[str, msgspec.Meta(max_length=200)] | None = None


class CastCreated(msgspec.Struct, frozen=True):
    id: str
    url: str
    status: str


class Progress(msgspec.Struct, frozen=True):
    chunks_done: int
    chunks_planned: int | None
    audio_seconds: float
    lead_seconds: float | None


class CastView(msgspec.Struct, frozen=True):
    """`GET /v1/casts/{id}`: public facts and progress; never the text."""

    id: str
    url: str
    status: str
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


class RecordView(msgspec.Struct, frozen=True):
    """One record of a cast stream as JSON: headers as UTF-8 pairs, the body as base64."""

    seq_num: int
    timestamp: int
    headers: list[tuple[str, str]]
    body: str


class RecordsPage(msgspec.Struct, frozen=True):
    records: list[RecordView]
    tail: int


def record_view(record: Record) -> RecordView:
    return RecordView(
        seq_num=record.seq_num,
        timestamp=record.timestamp,
        headers=[
            (k.decode("utf-8", "replace"), v.decode("utf-8", "replace")) for k, v in record.headers
        ],
        body=base64.b64encode(record.body).decode("ascii"),
    )


def cast_view(status: CastStatus, base_url: str) -> CastView:
    meta = status.meta
    api = f"{base_url}/v1/casts/{status.id}"
    return CastView(
        id=status.id,
        url=f"{base_url}/c/{status.id}",
        status=status.state.value,
        title=meta.title,
        voice=meta.voice,
        speed=meta.speed,
        format=meta.format,
        model=meta.model,
        sample_rate=meta.sample_rate,
        created=meta.created_ms // 1000,
        attempt=status.attempt,
        progress=Progress(
            chunks_done=status.chunks_done,
            chunks_planned=status.chunks_planned,
            audio_seconds=status.audio_ms / 1000,
            lead_seconds=None if status.lead_ms is None else status.lead_ms / 1000,
        ),
        error=status.error,
        audio_url=f"{api}/audio",
        records_url=f"{api}/records",
        events_url=f"{api}/events",
    )


_SPACE = re.compile(r"\s+")
_SENTENCE_END = re.compile("(?<=[.!?\u2026\u3002\uff01\uff1f])\\s")


def derive_title(text: str, limit: int = TITLE_CHARS) -> str:
    """A title from the opening of `text`: its first sentence or line, cut at a word."""
    stripped = text.strip()
    first_line = stripped.split("\n", 1)[0]
    first = _SENTENCE_END.split(first_line, maxsplit=1)[0]
    title = _SPACE.sub(" ", first).strip()
    if len(title) <= limit:
        return title or "Untitled cast"
    cut = title[: limit - 1]
    if " " in cut[limit // 2 :]:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" ,;:-") + "…"
