"""What a client's events carry, checked as msgspec shapes before anything is done with them.

The `wyoming` package decodes the framing and hands over `event.data` as parsed JSON of any
shape; these Structs take the fields speechd reads (others, such as `context`, are ignored)
and refuse wrong types with one clear line.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

import msgspec
from msgspec import Meta

from speechd.errors import InvalidRequest

from ._bounds import MAX_VOICE_CHARS

__all__ = ["Chunk", "Start", "Synthesize", "Voice", "decode"]

_LANGUAGE_CHARS = 35  # the longest BCP 47 tag in common use is far shorter


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


class Start(msgspec.Struct, frozen=True):
    voice: Voice | None = None
    text_format: str | None = None


class Chunk(msgspec.Struct, frozen=True):
    text: str


S = TypeVar("S", bound=msgspec.Struct)


def decode(data: Any, shape: type[S], event: str) -> S:
    """`data` as `shape`; `InvalidRequest` naming the field when it does not fit."""
    try:
        return msgspec.convert(data, shape)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(f"A {event} event's data does not fit: {exc}.") from None
