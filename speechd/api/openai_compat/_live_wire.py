"""Wire shapes of live casts: the input route and the WebSocket's messages (msgspec Structs).

Client to server on `/v1/audio/speech/live`: first a `LiveStart` (no `type`, or
`"session.start"`), then `InputAppend` / `InputDone`, tagged by `type`. Server to client:
`LiveCastMessage` (`cast`), `InputAccepted` (`input.accepted`, after each append),
`CaptionMessage` (`speech.audio.caption`, before the chunk's audio), the audio (a binary frame,
or `DeltaMessage`: `speech.audio.delta`), then `DoneMessage` (`speech.audio.done`, with usage)
or an `error` (OpenAI's error object under `error`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from speechd.engine import MAX_SPEED, MIN_SPEED
from speechd.limits import MAX_NAME_CHARS, MAX_TITLE_CHARS, MAX_VOICE_CHARS
from speechd.service import MAX_PIECE_CHARS, MAX_PIECES

__all__ = [
    "MAX_INPUT_BODY_BYTES",
    "MAX_WS_MESSAGE_BYTES",
    "CaptionMessage",
    "DeltaMessage",
    "DoneMessage",
    "ErrorMessage",
    "InputAccepted",
    "InputAppend",
    "InputDone",
    "InputPiece",
    "LiveCastCreated",
    "LiveCastMessage",
    "LiveStart",
    "Usage",
]

MAX_INPUT_BODY_BYTES = 12 * MAX_PIECE_CHARS + 4096
"""`POST /v1/casts/{id}/input`'s body limit: the longest piece even when every character is
JSON-escaped as a surrogate pair (12 bytes), plus the other fields."""
MAX_WS_MESSAGE_BYTES = 12 * MAX_PIECE_CHARS + 4096
"""The longest WebSocket message `/v1/audio/speech/live` takes (the server's `ws_max_size`
too, so a longer one is refused before it is read)."""

Seq = Annotated[int, Meta(ge=0, le=MAX_PIECES)]
Name = Annotated[str, Meta(min_length=1, max_length=MAX_NAME_CHARS)]
Voice = Annotated[str, Meta(min_length=1, max_length=MAX_VOICE_CHARS)]
ResponseFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]


class InputPiece(msgspec.Struct, frozen=True, kw_only=True):
    """`POST /v1/casts/{id}/input`: a piece, `done`, or both. `seq`: the pieces this writer
    sent before (optional); a mismatch is a 409 naming the input's `seq`."""

    text: str = ""
    done: bool = False
    seq: Seq | None = None


class InputAccepted(msgspec.Struct, frozen=True, kw_only=True):
    """The input after an append: `seq` pieces (the `seq` to send next), `chars` in all."""

    id: str
    seq: int
    chars: int
    done: bool
    type: str = "input.accepted"


class LiveCastCreated(msgspec.Struct, frozen=True):
    """`POST /v1/casts` with `"live": true`: the cast and how to write its input."""

    id: str
    url: str
    status: str
    input_url: str
    input_token: str


class LiveStart(msgspec.Struct, frozen=True, kw_only=True):
    """The WebSocket's first message. `stream_format`: `audio` sends the audio as binary
    frames, `json` as `speech.audio.delta` messages (base64, like the SSE format)."""

    type: Literal["session.start"] | None = None
    model: Name | None = None
    voice: Voice | None = None
    speed: Annotated[float, Meta(ge=MIN_SPEED, le=MAX_SPEED)] | None = None
    response_format: ResponseFormat | None = None
    stream_format: Literal["audio", "json"] | None = None
    title: Annotated[str, Meta(max_length=MAX_TITLE_CHARS)] | None = None
    input: str = ""
    input_format: Literal["text", "ssml"] | None = None
    normalize: bool = True


class InputAppend(msgspec.Struct, frozen=True, kw_only=True, tag="input.append", tag_field="type"):
    text: str
    seq: Seq | None = None


class InputDone(msgspec.Struct, frozen=True, kw_only=True, tag="input.done", tag_field="type"):
    text: str = ""
    seq: Seq | None = None


class LiveCastMessage(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    url: str
    input_url: str
    input_token: str
    type: str = "cast"


class CaptionMessage(msgspec.Struct, frozen=True, kw_only=True):
    """A chunk's text, sent before its audio: `index` (its place in the cast), `offset_ms`
    and `duration_ms` (where it plays)."""

    index: int
    text: str
    offset_ms: int
    duration_ms: int
    type: str = "speech.audio.caption"


class DeltaMessage(msgspec.Struct, frozen=True, kw_only=True):
    audio: str
    type: str = "speech.audio.delta"


class Usage(msgspec.Struct, frozen=True):
    input_tokens: int
    output_tokens: int
    total_tokens: int


class DoneMessage(msgspec.Struct, frozen=True, kw_only=True):
    usage: Usage
    type: str = "speech.audio.done"


class ErrorMessage(msgspec.Struct, frozen=True, kw_only=True):
    error: dict[str, Any]
    type: str = "error"
