"""Word timings in the cast: per record as the worker writes them (`record_words`), and for
the whole cast as readers assemble them (`placed`, by `_words.CastWords` and `cast_captions`).

A record's words are timed from its own start (the `w` header, see `_records`); a word's time
in the cast is the sum of the durations (`d`) of the playable records before its record, plus
its own offset. The records are the playable sequence (`_playable`: the rule every reader
shares), so the times match the cast's audio file, attempts included, to within a
millisecond of rounding per record.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import msgspec

from ._records import Word

__all__ = ["CastCaptions", "CastWord", "placed", "record_words"]


class TimedSpan(Protocol):
    """A word placed in a chunk's PCM, in samples (`speechd.engine._timing.WordTiming`; its `source`
    and `mark`, where it has them, are read too)."""

    @property
    def text(self) -> str: ...
    @property
    def start(self) -> int: ...
    @property
    def end(self) -> int: ...


def record_words(
    words: Sequence[TimedSpan],
    begin: int,
    end: int,
    duration_ms: int,
    rate: int,
    *,
    final: bool,
) -> tuple[Word, ...]:
    """The words of one audio record holding samples [begin, end) of its chunk's PCM.

    A word belongs to the record it starts in (the chunk's `final` record takes any that
    start at its very end); times are ms from `begin`, clipped to `duration_ms`, the record's
    `d`, so a word that runs past a record's end (only where a long chunk is split) ends with
    it.
    """
    out: list[Word] = []
    for word in words:
        if word.start < begin or (word.start >= end and not final):
            continue
        start_ms = min(round((word.start - begin) * 1000 / rate), duration_ms)
        end_ms = min(max(round((word.end - begin) * 1000 / rate), start_ms), duration_ms)
        out.append(Word(start_ms, end_ms, word.text, _source(word), getattr(word, "mark", "")))
    return tuple(out)


def _source(word: TimedSpan) -> tuple[int, int] | None:
    source = getattr(word, "source", None)
    if source is None or len(source) != 2 or source[0] < 0 or source[1] < source[0]:
        return None
    return (int(source[0]), int(source[1]))


class CastWord(msgspec.Struct, frozen=True):
    """A word (or phrase) of a cast: ms from the start of the cast's audio; `source`: where
    it is in the input as sent ([begin, end) characters; None when unknown); a mark (SSML's
    named point) has no text and its name in `mark`."""

    text: str
    start_ms: int
    end_ms: int
    source: tuple[int, int] | None = None
    mark: str = ""


def placed(word: Word, at_ms: int) -> CastWord:
    """`word` of a record whose audio starts `at_ms` into the cast, in the cast's time."""
    return CastWord(
        word.text, at_ms + word.start_ms, at_ms + word.end_ms, word.source, word.mark
    )


class CastCaptions(msgspec.Struct, frozen=True):
    """A cast's words so far. `unit` is `word` or `phrase` ("" while there are none);
    `audio_ms` is the length of the playable audio they were read with; `born_ms` the birth
    of the stream they were read from (`CastHead.born_ms`: a cast made again has another)."""

    words: list[CastWord]
    unit: str
    audio_ms: int
    born_ms: int = 0
