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

from speechd.service import MAX_PIECE_CHARS, MAX_PIECES, LiveRequest

from .._fields import AudioFormat, Name, Speed, Title, Voice

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
    speed: Speed | None = None
    response_format: AudioFormat | None = None
    stream_format: Literal["audio", "json"] | None = None
    title: Title | None = None
    input: str = ""
    input_format: Literal["text", "ssml"] | None = None
    normalize: bool = True

    def to_live_request(self) -> LiveRequest:
        """The live cast it asks for (`input`, if any, is its first piece)."""
        return LiveRequest(
            voice=self.voice,
            speed=1.0 if self.speed is None else self.speed,
            format=self.response_format or "mp3",
            title=self.title,
            text=self.input,
            input_format=self.input_format,
            normalize=self.normalize,
        )


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
