"""Trimming the silence Kokoro pads every utterance with, so that chunks played back to back
sound like one utterance (`trim_silence`), by how each chunk ends (`chunk_ending`); and how
long a pause's own chunk is (`silence_samples`), so that the silence heard between two voices
is the pause asked for."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from speechd.text import Chunk

from ._config import SAMPLE_RATE
from ._runtime import SAMPLES_PER_FRAME

__all__ = ["LEAD_S", "chunk_ending", "silence_samples", "trim_silence"]

#: Below this a sample counts as silent (-60 dBFS).
_SILENT = 1e-3
#: Silence kept before the voice starts.
LEAD_S = 0.05
#: Silence kept after the voice stops, by how the chunk ends: a sentence, a clause or comma,
#: or a cut between two words (a pause there sounds like a hesitation).
_PAUSE_S = {"sentence": 0.35, "clause": 0.2, "word": 0.04, "break": 0.0}
_FADE = 120  # samples (5 ms)


def chunk_ending(chunk: Chunk) -> str:
    """How a chunk ends, for the pause kept after it: "sentence", "clause", "word", or
    "break" (an SSML break follows: its pause is a chunk of silence of its own)."""
    if getattr(chunk, "pause_ms", 0):
        return "break"  # the pause after it is silence of its own
    last = chunk.phonemes.rstrip("\"')\u201d ")[-1:]
    if last in ".!?\u2026":
        return "sentence"
    return "clause" if last in ",;:\u2014" else "word"


def _trim_span(
    pcm: npt.NDArray[np.float32], durations: list[int] | None, ending: str
) -> tuple[int, int] | None:
    """The samples of a chunk's raw audio that `trim_silence` keeps, `pcm[head:tail]`; None to keep
    it as it is."""
    if durations is None:  # no markers known: the signal alone decides
        head = tail = len(pcm)
    elif len(durations) < 3 or sum(durations) * SAMPLES_PER_FRAME != len(pcm):
        return None  # not the layout we know
    else:
        head = durations[0] * SAMPLES_PER_FRAME  # the start marker: silence
        tail = len(pcm) - durations[-1] * SAMPLES_PER_FRAME  # the end marker
    voiced = np.flatnonzero(np.abs(pcm[:tail]) > _SILENT)
    if voiced.size:
        head = min(head, int(voiced[0]))
        tail = min(tail, int(voiced[-1]) + 1 + int(_PAUSE_S[ending] * SAMPLE_RATE))
    elif durations is None:
        return None  # silent throughout, and nothing else to go by
    return max(0, head - int(LEAD_S * SAMPLE_RATE)), tail


def _faded(pcm: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    out = np.array(pcm, dtype=np.float32)
    fade = min(_FADE, len(out) // 2)
    if fade:
        ramp = np.linspace(0.0, 1.0, fade, endpoint=False, dtype=np.float32)
        out[:fade] *= ramp
        out[len(out) - fade :] *= ramp[::-1]
    return out


def trim_silence(
    pcm: npt.NDArray[np.float32], durations: list[int] | None, ending: str
) -> tuple[npt.NDArray[np.float32], int]:
    """Cut the silence Kokoro pads every utterance with, so chunks join like one utterance;
    returns the PCM kept and where it began in `pcm` (word timings count from there).

    The model gives its start and end markers durations of their own and stretches the
    last phoneme: ~0.35 s of silence before each chunk and often as much after it, which,
    played back to back, would put a pause at every chunk boundary, mid-sentence included.
    We keep 50 ms before the voice starts and, after it stops, a pause that fits how the
    chunk ends (`_PAUSE_S`), never more than the model made; the cut edges fade over 5 ms.
    Without durations the signal alone decides; durations that do not fit the audio leave
    it whole.
    """
    span = _trim_span(pcm, durations, ending)
    if span is None:
        return np.ascontiguousarray(pcm), 0  # not the layout we know: leave it as it is
    return _faded(pcm[span[0] : span[1]]), span[0]


def silence_samples(chunk: Any, sample_rate: int = SAMPLE_RATE) -> int:
    """The samples of a pause's own chunk (`speechd.text.Chunk`, silent): its `pause_ms`, or,
    when speech follows it at once, its `lead_ms` less the `LEAD_S` that speech keeps before
    its voice, so the silence heard between two voices is the pause asked for (the speech
    before a pause keeps none after its voice: `chunk_ending`)."""
    lead_ms = getattr(chunk, "lead_ms", 0)
    pause_ms = getattr(chunk, "pause_ms", 0)
    lead = max(lead_ms / 1000 - LEAD_S, 0.0) if lead_ms else 0.0
    return round((lead + pause_ms / 1000) * sample_rate)
