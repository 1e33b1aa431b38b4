"""Wire shapes of the OpenAI-compatible endpoints (msgspec Structs, checked on decode).

`SpeechRequest` follows OpenAI's `POST /v1/audio/speech`: the SDK omits every field its caller
did not set, so all but `input` have defaults (and `null` reads as "not set"). Unknown fields
are ignored, as other OpenAI-compatible servers' extensions are. speechd's extensions:
`stream: false` answers the whole file at once, with `Content-Length`; `word_timestamps: true`
with `stream_format: "sse"` adds a `speech.audio.words` event after each audio delta (ignored
otherwise). Every field is bounded on decode (`speechd.limits`), before the route runs.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from speechd.limits import MAX_INPUT_CHARS
from speechd.service import CastRequest

from .._fields import AudioFormat, Name, Speed, Voice

__all__ = [
    "MAX_INPUT_CHARS",
    "AudioModel",
    "AudioModelList",
    "Model",
    "ModelList",
    "SpeechRequest",
    "VoiceEntry",
    "VoiceList",
    "VoiceRef",
]

class VoiceRef(msgspec.Struct, frozen=True):
    """OpenAI's object form of a voice: `{"id": "..."}`."""

    id: Voice


class SpeechRequest(msgspec.Struct, frozen=True, kw_only=True):
    input: Annotated[str, Meta(min_length=1, max_length=MAX_INPUT_CHARS)]
    model: Name | None = None
    voice: Voice | VoiceRef | None = None
    instructions: Annotated[str, Meta(max_length=MAX_INPUT_CHARS)] | None = None
    """Accepted for compatibility and ignored: Kokoro takes no style prompt."""
    response_format: AudioFormat | None = None
    speed: Speed | None = None
    stream_format: Literal["audio", "sse"] | None = None
    stream: bool | None = None
    word_timestamps: bool | None = None
    start: Literal["smooth", "now"] | None = None
    """speechd's: "smooth" holds a streamed response's audio back until its cast can play
    through without a stall (on a device slower than real time), "now" sends the first audio
    at once; the server's `--start` when absent."""
    input_format: Literal["text", "ssml"] | None = None
    """speechd's: `ssml` reads `input` as an SSML document (absent: when it starts with
    `<speak`)."""
    normalize: bool | None = None
    """speechd's: false reads `input` as sent, without speechd's normalisation."""

    @property
    def voice_name(self) -> str | None:
        return self.voice.id if isinstance(self.voice, VoiceRef) else self.voice

    def to_cast_request(self, *, at_once: bool, scope: str = "") -> CastRequest:
        """The cast it asks for, OpenAI's unset fields at their defaults (`at_once`: the
        caller wants its first audio at once; `scope`: who shares it, `CastRequest.scope`)."""
        return CastRequest(
            text=self.input,
            voice=self.voice_name,
            speed=1.0 if self.speed is None else self.speed,
            format=self.response_format or "mp3",
            at_once=at_once,
            input_format=self.input_format,
            normalize=self.normalize is not False,
            scope=scope,
        )


class Model(msgspec.Struct, frozen=True):
    id: str
    created: int
    object: str = "model"
    owned_by: str = "speechd"


class ModelList(msgspec.Struct, frozen=True):
    data: list[Model]
    object: str = "list"


class VoiceEntry(msgspec.Struct, frozen=True):
    id: str
    name: str


class VoiceList(msgspec.Struct, frozen=True):
    voices: list[VoiceEntry]


class AudioModel(msgspec.Struct, frozen=True):
    id: str


class AudioModelList(msgspec.Struct, frozen=True):
    models: list[AudioModel]
