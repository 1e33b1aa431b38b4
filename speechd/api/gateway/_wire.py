"""Wire shapes of the cast API and the public read path (msgspec Structs), and their one
mapping each: a new cast to the service's request (`NewCast.to_cast_request`,
`to_live_request`), a cast's status and records to their views (`cast_view`, `record_view`)."""

from __future__ import annotations

import base64
from typing import Annotated, Literal

import msgspec

from speechd.casts import CastStatus
from speechd.limits import (
    MAX_CAST_BODY_BYTES,
    MAX_CAST_CHARS,
    MAX_NAME_CHARS,
    MAX_VOICE_CHARS,
)
from speechd.service import CastRecord, CastRequest, LiveRequest

from .._fields import AudioFormat, Speed, Title
from .._links import cast_api_url, cast_url

__all__ = [
    "MAX_CAST_BODY_BYTES",
    "MAX_CAST_CHARS",
    "CastCreated",
    "CastView",
    "NewCast",
    "Progress",
    "RecordView",
    "RecordsPage",
    "cast_view",
    "record_view",
]

class NewCast(msgspec.Struct, frozen=True, kw_only=True):
    """`POST /v1/casts`. A missing title is derived from the text (`derive_title`). Every
    field is bounded on decode (`speechd.limits`), before the route runs. With `live`, the
    text comes later (`input`, if any, is its first piece: at most `MAX_PIECE_CHARS`, checked
    by `speechd.service.LiveCasts`); without it an empty `input` is refused
    (`CastService.submit`)."""

    input: Annotated[str, msgspec.Meta(max_length=MAX_CAST_CHARS)] = ""
    voice: Annotated[str, msgspec.Meta(max_length=MAX_VOICE_CHARS)] | None = None
    speed: Speed = 1.0
    response_format: AudioFormat = "mp3"
    model: Annotated[str, msgspec.Meta(max_length=MAX_NAME_CHARS)] | None = None
    title: Title | None = None
    live: bool = False
    input_format: Literal["text", "ssml"] | None = None
    """`ssml`: `input` is an SSML document; absent, it is SSML when it starts with `<speak`."""
    normalize: bool = True
    """False: the text is read as sent (no numbers, units, URLs or Markdown rewritten)."""

    def to_cast_request(self, *, scope: str = "") -> CastRequest:
        """The cast it asks for (`scope`: who shares it, `CastRequest.scope`)."""
        return CastRequest(
            text=self.input,
            voice=self.voice,
            speed=self.speed,
            format=self.response_format,
            title=self._title(),
            input_format=self.input_format,
            normalize=self.normalize,
            scope=scope,
        )

    def to_live_request(self) -> LiveRequest:
        """The live cast it asks for (`live`): `input`, if any, is its first piece."""
        return LiveRequest(
            voice=self.voice,
            speed=self.speed,
            format=self.response_format,
            title=self._title(),
            text=self.input,
            input_format=self.input_format,
            normalize=self.normalize,
        )

    def _title(self) -> str | None:
        return (self.title or "").strip() or None


class CastCreated(msgspec.Struct, frozen=True):
    id: str
    url: str
    status: str


class Progress(msgspec.Struct, frozen=True):
    chunks_done: int
    chunks_planned: int | None
    audio_seconds: float
    lead_seconds: float | None
    queue_position: int | None = None
    """A queued cast's place in line: waiting casts ahead of it (0: next); else null."""
    starts_in_seconds: float | None = None
    """A queued cast's estimated wait until it starts, from measured capacity; a loading one's
    (no worker holds the model: it is being taken again), the rest of the model's measured
    load time on top; else null."""
    hold_seconds: float = 0.0
    """How long after its first audio its listeners start playing, so that the rest plays
    without a stall: a cast the device cannot make in real time is held back that long
    (0: it plays at once)."""
    plays_in_seconds: float | None = None
    """While that hold still runs: seconds until its listeners start hearing it; else null."""


class CastView(msgspec.Struct, frozen=True):
    """`GET /v1/casts/{id}`: public facts and progress; never the text. A failed cast says why
    (`error`) and whether the same request makes it again (`retryable`), keeping its audio."""

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
    captions_url: str
    words_url: str
    retryable: bool = False


class RecordView(msgspec.Struct, frozen=True):
    """One record of a cast stream as JSON: headers as UTF-8 pairs, the body as base64. Only
    the headers a reader needs are carried (those of `speechd.service.CastRecord`, an
    allow-list): the worker's plan position and resume checkpoint, and anything newer, stay
    private."""

    seq_num: int
    timestamp: int
    headers: list[tuple[str, str]]
    body: str


class RecordsPage(msgspec.Struct, frozen=True):
    records: list[RecordView]
    tail: int


def record_view(record: CastRecord) -> RecordView:
    return RecordView(
        seq_num=record.seq_num,
        timestamp=record.timestamp,
        headers=[
            (k.decode("utf-8", "replace"), v.decode("utf-8", "replace"))
            for k, v in record.headers
        ],
        body=base64.b64encode(record.body).decode("ascii"),
    )


def cast_view(status: CastStatus, base_url: str) -> CastView:
    meta = status.meta
    api = cast_api_url(base_url, status.id)
    return CastView(
        id=status.id,
        url=cast_url(base_url, status.id),
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
            queue_position=status.queue_position,
            starts_in_seconds=None if status.starts_in_ms is None else status.starts_in_ms / 1000,
            hold_seconds=status.hold_ms / 1000,
            plays_in_seconds=None if status.plays_in_ms is None else status.plays_in_ms / 1000,
        ),
        error=status.error,
        audio_url=f"{api}/audio",
        records_url=f"{api}/records",
        events_url=f"{api}/events",
        captions_url=f"{api}/captions.vtt",
        words_url=f"{api}/words",
        retryable=status.retryable,
    )
