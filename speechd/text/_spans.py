"""Where each unit's phonemes sit in its chunk: found when planning, pure and cheap.

When the chunker joins units into a chunk, `word_spans` records where each unit's phonemes sit
in `Chunk.phonemes` (a `Span`: its caption text and [start, end) character offsets, with the
punctuation at its edges left out, since the model gives a pause there rather than the word),
and the characters of the input as sent it was read from. After synthesis the engine places
the spans in the chunk's audio by the durations the model predicts (`speechd.engine`'s word
timings): a span is what a timed word starts from.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final, Literal, Protocol

import msgspec

__all__ = ["NO_SOURCE", "Span", "UnitKind", "unit_kind", "word_spans"]

#: Punctuation the model reads as a pause: not part of a word's own time.
_EDGE_PUNCTUATION: Final = frozenset(
    ";:,.!?\"()'- \u00a1\u00bf\u2014\u2026\u00ab\u00bb\u201c\u201d"
)
_SPACES = re.compile(r" {2,}")

UnitKind = Literal["word", "phrase"]
#: Languages whose G2P gives a unit per word (misaki's English); the others give phrases.
_WORD_LANGUAGES: Final = frozenset({"a", "b"})


def unit_kind(lang: str) -> UnitKind:
    """What one unit of `lang`'s G2P is: a word (English) or a phrase (whole-phrase G2Ps)."""
    return "word" if lang in _WORD_LANGUAGES else "phrase"


#: The source of a unit whose place in the input is not known.
NO_SOURCE: Final = (-1, -1)


class Span(msgspec.Struct, frozen=True, array_like=True):
    """One unit of a chunk: its caption text and its phonemes' place in `Chunk.phonemes`,
    characters [start, end), edge punctuation excluded; `source`: the characters of the
    input as sent it was read from, [begin, end). A `mark` (SSML's named point) has no text
    and start == end: where the next unit starts."""

    text: str
    start: int
    end: int
    source: tuple[int, int] = NO_SOURCE
    mark: str = ""



class UnitLike(Protocol):
    @property
    def text(self) -> str: ...
    @property
    def phonemes(self) -> str: ...
    @property
    def source(self) -> tuple[int, int]: ...
    @property
    def mark(self) -> str: ...


def word_spans(units: Iterable[UnitLike], phonemes: str) -> tuple[Span, ...]:
    """Where each unit's phonemes sit in `phonemes`, the units' phonemes as joined into a
    chunk (spaces collapsed, ends stripped). Units without phonemes (a stray symbol) get no
    span, but a mark gets an empty one where the next unit starts; a unit not found (the
    chunk was truncated before it) ends the spans."""
    spans: list[Span] = []
    cursor = 0
    for unit in units:
        if unit.mark:
            at = cursor + 1 if phonemes[cursor : cursor + 1] == " " else cursor
            spans.append(Span("", at, at, unit.source, unit.mark))
            continue
        core = _SPACES.sub(" ", unit.phonemes.strip())
        text = unit.text.strip()
        if not core or not text:
            continue
        at = phonemes.find(core, cursor)
        if at < 0:
            break
        start, end = at, at + len(core)
        cursor = end
        while start < end and phonemes[start] in _EDGE_PUNCTUATION:
            start += 1
        while end > start and phonemes[end - 1] in _EDGE_PUNCTUATION:
            end -= 1
        if start == end:  # punctuation only ("—"): it shares the pause, not a word's time
            continue
        spans.append(Span(text, start, end, unit.source))
    return tuple(spans)
