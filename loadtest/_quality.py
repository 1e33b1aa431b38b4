"""What a graph variant costs in quality, against torch's float32 on the same weights: the
fixed texts and voices `loadtest.bench_engine` and the model tier's tests render on every
runtime and graph, and how two renderings of them compare.

Each text is one chunk, rendered with a fixed seed, so every runtime draws the same decoder
noise (`speechd.engine._runtime.excitation`) and the renderings differ by their arithmetic
only. Compared: the durations (word timings are read off them, so they must be identical),
the log-spectral distance of each chunk (`speechd.engine._quality`) and the words an offline
recogniser reads back (pocketsphinx, on the English voices, where it recovers 85-100%).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np

from speechd.engine import Engine
from speechd.engine._quality import log_spectral_distance
from speechd.text import ChunkPolicy

__all__ = ["SEED", "TEXTS", "VOICES", "Quality", "Rendering", "compare", "load", "render", "save"]

#: Sentences none of which is in the int8 calibration set (`speechd.engine._calibration`).
TEXTS: Final = (
    "The museum opens at nine on weekdays and stays open late on Fridays.",
    "Could you please pass the salt and the pepper to the end of the table?",
    "Four hundred and twelve people signed the petition before lunch.",
    "The storm knocked down two old oak trees along the river path last night.",
    "Honestly, I never expected the little bakery on the corner to win the prize!",
    "A quiet voice in the back of the room asked whether the meeting was over.",
)
#: Voices pocketsphinx reads well (tests/engine/test_model.py): recall means broken audio.
VOICES: Final = ("af_heart", "am_adam")
SEED: Final = 11
WHOLE: Final = ChunkPolicy(first_tokens=510, first_max_tokens=510, min_tokens=510, rtf=0)


@dataclass(frozen=True)
class Rendering:
    """One text read by one voice: its audio (24 kHz), the model's durations, and where the
    audio began in the model's output (`Synthesis.head`)."""

    text: str
    voice: str
    pcm: np.ndarray
    durations: tuple[int, ...]
    head: int = 0


def render(engine: Engine) -> list[Rendering]:
    """Every text in every voice, one chunk each, seeded."""
    out: list[Rendering] = []
    for voice in VOICES:
        for text in TEXTS:
            (chunk,) = engine.plan(text, voice, WHOLE)
            made = engine.synthesize(chunk, voice, 1.0, seed=SEED)
            out.append(Rendering(text, voice, np.asarray(made.pcm), made.durations, made.head))
    return out


@dataclass(frozen=True)
class Quality:
    """How renderings compare with the reference's."""

    same_durations: int
    """Chunks whose durations are the reference's, of `chunks`."""
    chunks: int
    distance_db: tuple[float, ...]
    """The log-spectral distance from the reference's of each chunk timed as the reference
    timed it (the others' speech is not aligned: they count in `same_durations`)."""
    recall: float
    """Words the recogniser read back, over every chunk."""
    reference_recall: float

    @property
    def mean_db(self) -> float:
        return float(np.mean(self.distance_db)) if self.distance_db else float("nan")

    @property
    def max_db(self) -> float:
        return float(np.max(self.distance_db)) if self.distance_db else float("nan")


def compare(got: Sequence[Rendering], reference: Sequence[Rendering]) -> Quality:
    """`got` against `reference` (the same texts and voices, in order)."""
    from harness.speech import recall, transcribe_pcm16

    same = 0
    distances: list[float] = []
    heard: list[float] = []
    expected: list[float] = []
    for mine, theirs in zip(got, reference, strict=True):
        assert (mine.text, mine.voice) == (theirs.text, theirs.voice), "the same set, in order"
        if mine.durations == theirs.durations:
            same += 1
            distances.append(log_spectral_distance(*_aligned(mine, theirs)))
        for rendering, into in ((mine, heard), (theirs, expected)):
            pcm16 = (np.clip(rendering.pcm, -1, 1) * 32767).astype("<i2").tobytes()
            into.append(recall(rendering.text, transcribe_pcm16(pcm16, 24_000)))
    return Quality(
        same, len(got), tuple(distances), float(np.mean(heard)), float(np.mean(expected))
    )


def _aligned(a: Rendering, b: Rendering) -> tuple[np.ndarray, np.ndarray]:
    """The two renderings over the stretch of the model's output both kept. The trim's
    edges are the signal's where the voice starts before its marker ends or after the last
    token (the first and last samples above -60 dBFS), which another decoder's rounding can
    move by a few milliseconds: compared where they fell, the same speech 4 ms apart
    measured 3.6 dB, aligned 1.4."""
    start = max(a.head, b.head)
    end = min(a.head + len(a.pcm), b.head + len(b.pcm))
    return a.pcm[start - a.head : end - a.head], b.pcm[start - b.head : end - b.head]


def save(renderings: Sequence[Rendering], path: Path) -> None:
    """Write renderings (the reference a benchmark's other children compare with)."""
    arrays = {f"pcm{i}": r.pcm for i, r in enumerate(renderings)}
    arrays |= {f"durations{i}": np.asarray(r.durations, np.int64) for i, r in enumerate(renderings)}
    index = [[r.text, r.voice, r.head] for r in renderings]
    np.savez(path, index=np.asarray(json.dumps(index)), **arrays)


def load(path: Path) -> list[Rendering]:
    with np.load(path) as data:
        index = json.loads(str(data["index"]))
        return [
            Rendering(
                text, voice, data[f"pcm{i}"], tuple(int(d) for d in data[f"durations{i}"]), head
            )
            for i, (text, voice, head) in enumerate(index)
        ]
