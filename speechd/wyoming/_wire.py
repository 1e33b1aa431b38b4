"""What a client's events carry, checked as msgspec shapes before anything is done with them.

The `wyoming` package decodes the framing and hands over `event.data` as parsed JSON of any
shape; these Structs take the fields speechd reads (others, such as `context`, are ignored)
and refuse wrong types with one clear line. A synthesis maps itself to the service's request
(`Synthesize.to_cast_request`, `Start.to_live_request`: raw PCM, the text read as its
`text_format` says), given the voice its connection picked for it.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

import msgspec
from msgspec import Meta

from speechd.errors import InvalidRequest
from speechd.service import CastRequest, LiveRequest

from ._bounds import MAX_VOICE_CHARS

__all__ = ["Chunk", "Start", "Synthesize", "Voice", "decode"]

_LANGUAGE_CHARS = 35  # the longest BCP 47 tag in common use is far shorter
_PCM = "pcm"


class Voice(msgspec.Struct, frozen=True):
    """`voice`: a name from `info` (a voice, an alias or a blend), or a language to pick one
    for. `speaker` is accepted and unused: every Kokoro voice is one speaker."""

    name: Annotated[str, Meta(max_length=MAX_VOICE_CHARS)] | None = None
    language: Annotated[str, Meta(max_length=_LANGUAGE_CHARS)] | None = None
    speaker: Annotated[str, Meta(max_length=MAX_VOICE_CHARS)] | None = None


class Synthesize(msgspec.Struct, frozen=True):
    text: str
    voice: Voice | None = None
    text_format: str | None = None

    def to_cast_request(self, voice: str | None, *, at_once: bool) -> CastRequest:
        """The cast it asks for, spoken by `voice` (None: the default), as raw PCM (`at_once`:
        its first audio at once, the server's `--start now`)."""
        return CastRequest(
            text=self.text,
            voice=voice,
            format=_PCM,
            at_once=at_once,
            input_format=_input_format(self.text_format),
        )


class Start(msgspec.Struct, frozen=True):
    voice: Voice | None = None
    text_format: str | None = None

    def to_live_request(self, voice: str | None) -> LiveRequest:
        """The live cast it asks for, spoken by `voice` (None: the default), as raw PCM."""
        return LiveRequest(voice=voice, format=_PCM, input_format=_input_format(self.text_format))


class Chunk(msgspec.Struct, frozen=True):
    text: str


def _input_format(text_format: str | None) -> str | None:
    """The cast's `input_format` for a Wyoming `text_format`: `ssml` reads the text as SSML
    (checked whole by the service, as on HTTP; a streamed synthesis takes plain text only),
    `text` as plain text, none as HTTP reads a text without one (SSML if it starts with
    `<speak`)."""
    if text_format is None or text_format in ("text", "ssml"):
        return text_format
    raise InvalidRequest(
        f"text_format is text or ssml, not {text_format[:20]!r}.", param="text_format"
    )


S = TypeVar("S", bound=msgspec.Struct)


def decode(data: Any, shape: type[S], event: str) -> S:
    """`data` as `shape`; `InvalidRequest` naming the field when it does not fit."""
    try:
        return msgspec.convert(data, shape)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(f"A {event} event's data does not fit: {exc}.") from None
