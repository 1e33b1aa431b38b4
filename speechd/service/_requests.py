"""What someone asks a door for, the bounds on it, and the checks of it that need no store.

`CastRequest` (a cast whose whole text comes with it) and `LiveRequest` (a live cast: its text
comes later, a piece at a time) are shaped by their door (each wire shape maps itself to one:
`to_cast_request`, `to_live_request`); `CastService.check` runs every check of either, in one
place, and returns a `CheckedRequest`, which makes the cast's recipe (`CheckedRequest.recipe`).
The checks here are the parts that read nothing but the request: its text (`check_text` for a
cast's, `check_piece` for a live piece), how to read it (`input_format`: plain text or SSML)
and its speed (`check_speed`); its format is the encoders' own check (`speechd.audio.
check_format`). Messages name the request's field (`param`) as the OpenAI-shaped errors do.
"""

from __future__ import annotations

import re
from typing import Final

import msgspec

from speechd.casts import schema
from speechd.errors import InvalidRequest, PayloadTooLarge
from speechd.text import MAX_SPEED, MIN_SPEED, looks_like_ssml

__all__ = [
    "MAX_LIVE_CHARS",
    "MAX_PIECES",
    "MAX_PIECE_CHARS",
    "MAX_TOKEN_CHARS",
    "MODEL",
    "CastRequest",
    "CheckedRequest",
    "LiveRequest",
    "check_piece",
    "check_speed",
    "check_text",
    "derive_title",
    "input_format",
    "title_for",
]

MODEL: Final = "kokoro"
"""The one model speechd runs; every cast's recipe names it."""
MAX_PIECE_CHARS: Final = 4096
"""The longest piece one append to a live cast's input takes (an LLM sends a few characters at
a time)."""
MAX_LIVE_CHARS: Final = 200_000
"""The longest input a live cast takes in all: as much as `POST /v1/casts` takes at once."""
MAX_PIECES: Final = 50_000
"""The most pieces one input takes (each is a record the worker reads)."""
MAX_TOKEN_CHARS: Final = 256
"""A bearer token longer than this is refused before it is hashed or compared."""

_TITLE_CHARS = 80
_TAGS = re.compile(r"<[^<>]{0,1024}>")
# C0 and C1 control characters but tab, newline and carriage return; lone surrogates.
_FORBIDDEN = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")


class CastRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A cast someone asked for, already shaped by its route (voice not yet resolved)."""

    text: str
    voice: str | None = None
    """A voice name, an OpenAI name, or a blend like `af_heart(2)+am_adam(1)`; None = default."""
    speed: float = 1.0
    format: str = "mp3"
    title: str | None = None
    at_once: bool = False
    """The caller wants its first audio at once (`start: now`): the worker may make the cast's
    first chunk while it waits in line. Only a request that creates the cast (or makes a
    failed one again) sets it for the cast; an identical request joining it changes nothing."""
    input_format: str | None = None
    """`text` or `ssml` (an SSML document, checked whole before the cast is made); None: SSML
    when the text starts with `<speak` (or an XML declaration)."""
    normalize: bool = True
    """False: read the text as sent, without speechd's normalisation (numbers, units, URLs,
    Markdown); inline pronunciations and the lexicon still apply."""
    scope: str = ""
    """Who shares the cast (`casts.cast_id`): "" every caller making the same request; else
    only callers of this scope (`--share-casts per-key`: one API key's)."""


class LiveRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A live cast someone asked for (the route checked the field types)."""

    voice: str | None = None
    speed: float = 1.0
    format: str = "mp3"
    title: str | None = None
    text: str = ""
    """A first piece of the input (may be empty)."""
    input_format: str | None = None
    """Only `text` (or None): a live cast's text is plain, its pronunciation markup and the
    lexicon included. SSML is read whole, so it is refused here: a document is only known to
    be well-formed and within its bounds at its end, and by then a live cast has spoken most
    of it (its markup read aloud, or an error after the audio)."""
    normalize: bool = True
    """False: read the text as sent, without speechd's normalisation."""


class CheckedRequest(msgspec.Struct, frozen=True):
    """A request that passed every check: its text (a cast's without the whitespace it ends
    with; a live cast's first piece as sent), the voice spec it is made with, its speed
    (rounded as the recipe keeps it), format and how its text is read, a cast's id (its
    content address; None for a live cast, whose id is random), and the SSML elements outside
    the subset it used (spoken as their text, each named once)."""

    text: str
    voice: str
    speed: float
    format: str
    input_format: str = "text"
    normalize: bool = True
    id: str | None = None
    unsupported: tuple[str, ...] = ()

    def recipe(self, *, title: str, created_ms: int) -> schema.Recipe:
        """The private recipe of the cast it makes, named `title` and made at `created_ms` (a
        live cast's then keeps no text, and adds its input's key and idle timeout)."""
        return schema.Recipe(
            text=self.text,
            model=MODEL,
            voice=self.voice,
            speed=self.speed,
            format=self.format,
            title=title,
            created_ms=created_ms,
            input_format=self.input_format,
            normalize=self.normalize,
        )


def _speakable(text: str, *, noun: str, param: str) -> None:
    bad = _FORBIDDEN.search(text)
    if bad is not None:
        char = ord(bad.group())
        what = "an unpaired surrogate" if 0xD800 <= char <= 0xDFFF else "the control character"
        raise InvalidRequest(f"The {noun} contains {what} U+{char:04X}.", param=param)


def check_text(text: str, *, max_chars: int, param: str = "input") -> str:
    """A cast's `text` without the whitespace it ends with (what it starts with stays: timed
    words give offsets into the text as sent), or `InvalidRequest` if it is empty, longer
    than `max_chars` or not speakable text (control characters but tab and newlines, lone
    surrogates)."""
    if len(text) > max_chars:
        raise InvalidRequest(f"The input is longer than {max_chars} characters.", param=param)
    _speakable(text, noun="input", param=param)
    text = text.rstrip()
    if not text.strip():
        raise InvalidRequest("The input is empty: there is nothing to speak.", param=param)
    return text


def check_piece(text: str, *, param: str = "text") -> None:
    """Raise unless `text` may be a piece of a live cast's input: at most `MAX_PIECE_CHARS`
    (else `PayloadTooLarge`), speakable (else `InvalidRequest`). Whitespace is kept as sent;
    an empty piece is allowed."""
    if len(text) > MAX_PIECE_CHARS:
        raise PayloadTooLarge(
            f"A piece is at most {MAX_PIECE_CHARS} characters; this one has {len(text)} "
            "(send it in several).",
            param=param,
        )
    _speakable(text, noun="text", param=param)


def check_speed(speed: float, *, param: str = "speed") -> float:
    """`speed` as a recipe keeps it (3 decimals), or `InvalidRequest` (naming `param`) outside
    the engine's bounds."""
    if not MIN_SPEED <= speed <= MAX_SPEED:
        raise InvalidRequest(
            f"The {param.replace('_', ' ')} must be between {MIN_SPEED} and {MAX_SPEED}.",
            param=param,
        )
    return round(float(speed), 3)


def input_format(request: CastRequest | LiveRequest, text: str) -> str:
    """How `request`'s text is read: `text` or `ssml` (a cast's, when it names none: SSML when
    `text` starts like a document); `InvalidRequest` for any other, and for SSML in a live
    cast."""
    if isinstance(request, LiveRequest):
        if request.input_format not in (None, "text"):
            raise InvalidRequest(
                "A live cast takes plain text (with [word](/phonemes/) pronunciations): an SSML "
                "document is only checked whole, so make it a cast of its own (no `live`).",
                param="input_format",
            )
        return "text"
    found = request.input_format or ("ssml" if looks_like_ssml(text) else "text")
    if found not in ("text", "ssml"):
        raise InvalidRequest(f"input_format is text or ssml, not {found!r}.", param="input_format")
    return found


def _title_text(text: str, ssml: bool) -> str:
    """What a title is taken from: an SSML document's first 4,096 characters without tags."""
    return " ".join(_TAGS.sub(" ", text[:4096]).split()) if ssml else text


def derive_title(text: str) -> str:
    """A title for a cast that has none: its first line, cut at a word near 80 characters."""
    line = " ".join(text.strip().split("\n", 1)[0].split())
    if len(line) <= _TITLE_CHARS:
        return line
    cut = line[:_TITLE_CHARS].rsplit(" ", 1)[0] or line[:_TITLE_CHARS]
    return cut.rstrip(" ,;:") + "…"


def title_for(text: str, *, ssml: bool) -> str:
    """The title of a cast asked for with none: `derive_title` of its text (an SSML
    document's without its tags)."""
    return derive_title(_title_text(text, ssml))
