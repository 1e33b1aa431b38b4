"""`describe` -> `info`: one tts program, Kokoro-82M, and every voice this deployment offers.

Each installed voice is listed under its own name with a readable description and its
language; each alias the deployment defines (OpenAI's names and `--voice-map`, blends
included) is listed too, described by what it resolves to. Home Assistant shows the voices by
language and sends back the name it lists. The voices come from the cast service, as
`/v1/audio/voices` reads them: the ready workers', or the last known set while none is ready.
"""

from __future__ import annotations

from collections.abc import Mapping

from wyoming.info import Attribution, Info, TtsProgram, TtsVoice

from speechd import __version__
from speechd.engine import VoiceBook
from speechd.errors import UnknownVoice
from speechd.service import CastService, voice_label
from speechd.text import LANGUAGES, voice_language

__all__ = ["LANGUAGE_TAGS", "PROGRAM", "describe", "language_tag"]

PROGRAM = "speechd"
"""The tts program's name (Home Assistant names its entity after it)."""

KOKORO = Attribution(name="hexgrad", url="https://huggingface.co/hexgrad/Kokoro-82M")
"""Who made the model and its voices."""

LANGUAGE_TAGS: Mapping[str, str] = {
    "a": "en-US",
    "b": "en-GB",
    "e": "es",
    "f": "fr",
    "h": "hi",
    "i": "it",
    "j": "ja",
    "p": "pt-BR",
    "z": "zh",
}
"""Kokoro's language letters as the language tags Home Assistant matches a pipeline by."""


def language_tag(voice: str) -> str:
    """The language tag of a voice name: `af_heart` -> `en-US`."""
    return LANGUAGE_TAGS[voice_language(voice)]


def _blend_label(book: VoiceBook, spec: str) -> str:
    terms = book.weights(spec)
    if len(terms) == 1:
        return voice_label(terms[0][0])
    parts = " + ".join(f"{round(w * 100)}% {voice_label(n).split(' (')[0]}" for n, w in terms)
    return f"a blend of {parts} ({LANGUAGES[book.language(spec)]})"


def _voice(name: str, description: str, language: str) -> TtsVoice:
    return TtsVoice(
        name=name,
        attribution=KOKORO,
        installed=True,
        description=description,
        version=None,
        languages=[language],
    )


async def describe(
    service: CastService, *, voice_map: Mapping[str, str], default_voice: str
) -> Info:
    """The info event's content; raises why no worker is ready when none ever was."""
    installed = await service.voices()
    book = VoiceBook(installed, voice_map=voice_map, default_voice=default_voice)
    voices = [_voice(v, voice_label(v), language_tag(v)) for v in installed]
    for alias in book.aliases:
        if alias in book.installed:
            continue
        try:
            spec = book.resolve(alias)
        except UnknownVoice:  # an alias of voices this deployment lacks
            continue
        label = f"{alias}: {_blend_label(book, spec)}"
        voices.append(_voice(alias, label, LANGUAGE_TAGS[book.language(spec)]))
    program = TtsProgram(
        name=PROGRAM,
        attribution=KOKORO,
        installed=True,
        description=f"Kokoro-82M on speechd {__version__}: every synthesis is a shareable cast",
        version=__version__,
        voices=voices,
        supports_synthesize_streaming=True,
    )
    return Info(tts=[program])
