"""Word (or phrase) timings of one chunk, from the durations Kokoro predicts: pure and cheap.

Kokoro's duration predictor gives every input token a whole number of frames of 600 samples
(25 ms at 24 kHz), its start and end markers included, and the audio is exactly those frames
end to end. So a chunk's words are placed by arithmetic alone:

1. When planning, the text's `word_spans` (`speechd.text`) records where each unit's
   phonemes sit in `Chunk.phonemes` (a `Span`: its caption text and [start, end) character
   offsets, with the punctuation at its edges left out, since the model gives a pause there
   rather than the word).
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
from collections.abc import Container, Sequence
from typing import Final

import msgspec
import numpy as np
import numpy.typing as npt

from speechd.text import NO_SOURCE, Span

from ._runtime import SAMPLES_PER_FRAME  # 600 samples (25 ms at 24 kHz) per frame

__all__ = ["LEAD_FRAMES", "SAMPLES_PER_FRAME", "WordTiming", "word_timings"]

#: The voice leads its aligned frame by this many frames (see the module docstring).
LEAD_FRAMES: Final = 3
#: Below this a sample counts as silent (-60 dBFS), as `_trim` counts it.
_SILENT: Final = 1e-3


class WordTiming(msgspec.Struct, frozen=True, array_like=True):
    """One unit of a synthesized chunk: its text and where it sounds in `Synthesis.pcm`,
    samples [start, end) (start <= end, both within the PCM, in order and not overlapping);
    `source` and `mark` as its `Span` says."""

    text: str
    start: int
    end: int
    source: tuple[int, int] = NO_SOURCE
    mark: str = ""


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
