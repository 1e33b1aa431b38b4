"""Word (or phrase) timings of one chunk, from the durations Kokoro predicts: pure and cheap.

Kokoro's duration predictor gives every input token a whole number of frames of 600 samples
(25 ms at 24 kHz), its start and end markers included, and the audio is exactly those frames
end to end. So a chunk's words are placed by arithmetic alone:

1. When planning, `word_spans` records where each unit's phonemes sit in `Chunk.phonemes`
   (a `Span`: its caption text and [start, end) character offsets, with the punctuation at
   its edges left out, since the model gives a pause there rather than the word).
2. After synthesis, `word_timings` turns spans into sample positions in the chunk's published
   PCM: a character becomes a token unless the model's vocabulary lacks it (Kokoro drops
   those), the token's frame is the sum of the durations before it, `head` (where `_trim`
   cut the model's leading silence: `Synthesis.head`) is subtracted, and the result is
   clipped to the PCM. The engine does this for every runtime, after the same trim.

Speed needs no handling here: Kokoro divides its durations by `speed` before rounding them
to frames, so the frames (and these timings) are already those of the audio made.

`LEAD_FRAMES`: the decoder's voice starts about three frames (75 ms) before the frame its
alignment assigns a phoneme; kokoro's own `KPipeline.join_timestamps` shifts by the same 3
frames, and measured against pocketsphinx on af_heart (tests/engine/test_timing_model.py) the
shift takes the median start deviation from ~80 ms to ~15 ms. The last word's end is also
pulled back to where the voice stops: the model stretches a chunk's final phoneme with
silence.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Container, Iterable, Sequence
from typing import Final, Literal, Protocol

import msgspec
import numpy as np
import numpy.typing as npt

from ._runtime import SAMPLES_PER_FRAME  # 600 samples (25 ms at 24 kHz) per frame

__all__ = [
    "LEAD_FRAMES",
    "NO_SOURCE",
    "SAMPLES_PER_FRAME",
    "Span",
    "UnitKind",
    "WordTiming",
    "unit_kind",
    "word_spans",
    "word_timings",
]

#: The voice leads its aligned frame by this many frames (see the module docstring).
LEAD_FRAMES: Final = 3
#: Below this a sample counts as silent (-60 dBFS), as `_trim` counts it.
_SILENT: Final = 1e-3
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


class WordTiming(msgspec.Struct, frozen=True, array_like=True):
    """One unit of a synthesized chunk: its text and where it sounds in `Synthesis.pcm`,
    samples [start, end) (start <= end, both within the PCM, in order and not overlapping);
    `source` and `mark` as its `Span` says."""

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


def word_timings(
    phonemes: str,
    spans: Sequence[Span],
    durations: Sequence[int] | None,
    *,
    head: int,
    pcm: npt.NDArray[np.float32],
    vocab: Container[str] | None = None,
) -> tuple[WordTiming, ...]:
    """The spans of a chunk placed in its published PCM (see the module docstring).

    `durations`: the model's frames per token for `phonemes`, start and end markers included;
    `head`: the sample of the model's output where `pcm` begins; `vocab`: the characters the
    model reads (None: all). Returns () when the durations do not fit the phonemes (another
    layout than Kokoro's), so a chunk gets no timings rather than wrong ones.
    """
    if not spans or not durations:
        return ()
    # Plain Python on purpose: a chunk has at most 512 tokens, and numpy's per-call cost
    # would dominate at that size (this runs once per chunk, beside a whole synthesis).
    tokens: Sequence[int]  # tokens[c]: the tokens the characters before c make
    if vocab is None or all(ch in vocab for ch in set(phonemes)):
        tokens = range(len(phonemes) + 1)
    else:  # Kokoro drops the characters its vocabulary lacks
        tokens = list(itertools.accumulate((ch in vocab for ch in phonemes), initial=0))
    if tokens[-1] + 2 != len(durations):
        return ()
    # starts[t]: the frame token t starts at (t = 0 is the start marker).
    starts = list(itertools.accumulate(durations, initial=0))
    shift = head + LEAD_FRAMES * SAMPLES_PER_FRAME
    length = len(pcm)
    timings: list[WordTiming] = []
    for span in spans:
        if span.end > len(phonemes):
            break
        # The character's token is 1 + the tokens before it (after the start marker).
        start = starts[1 + tokens[span.start]] * SAMPLES_PER_FRAME - shift
        end = starts[1 + tokens[span.end]] * SAMPLES_PER_FRAME - shift
        start = min(max(start, 0), length)
        end = start if span.mark else min(max(end, start), length)
        timings.append(WordTiming(span.text, start, end, span.source, span.mark))
    words = [i for i, t in enumerate(timings) if not t.mark]
    if words:
        last = timings[words[-1]]
        voiced = np.flatnonzero(np.abs(pcm[last.start : last.end]) > _SILENT)
        if voiced.size:
            end = last.start + int(voiced[-1]) + 1
            timings[words[-1]] = msgspec.structs.replace(last, end=end)
    return tuple(timings)
