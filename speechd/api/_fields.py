"""The field types the wire shapes share, each bounded once (checked on decode, so a bad value
is a 400 naming its field before any handler runs)."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from speechd.limits import MAX_NAME_CHARS, MAX_TITLE_CHARS, MAX_VOICE_CHARS
from speechd.text import MAX_SPEED, MIN_SPEED

__all__ = ["AudioFormat", "Name", "Speed", "Title", "Voice"]

AudioFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]
"""`response_format`: the encoders' formats (`speechd.audio.FORMATS`; a test holds them equal)."""
Speed = Annotated[float, Meta(ge=MIN_SPEED, le=MAX_SPEED)]
"""`speed`, within the engine's bounds."""
Voice = Annotated[str, Meta(min_length=1, max_length=MAX_VOICE_CHARS)]
"""A voice: a name, an alias or a blend (`af_bella(2)+af_sky(1)`)."""
Name = Annotated[str, Meta(min_length=1, max_length=MAX_NAME_CHARS)]
"""A model name."""
Title = Annotated[str, Meta(max_length=MAX_TITLE_CHARS)]
"""A cast's title."""
