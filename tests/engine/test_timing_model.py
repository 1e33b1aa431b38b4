"""Word timings on the real Kokoro-82M weights (tier `model`), against an independent aligner:
pocketsphinx's word segmentation of the same audio (its bundled en-us model, 16 kHz s16 mono).

The figure: over the words both agree on (matched in order), the median distance between our
start and pocketsphinx's is at most 120 ms, at speed 1 and at speed 1.5 (timings follow speed),
on torch and on ONNX Runtime.
The test prints the figures it measured (run with -s to see them).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from speechd.engine import Engine, EngineConfig, load_engine
from speechd.text import ChunkPolicy
from tests.support.devices import DEVICE, RUNTIMES, skip_unless_runs

pytestmark = pytest.mark.model

PARAGRAPH = (
    "The river wound slowly through the valley, past farms and quiet villages. "
    "Every morning, the old ferryman rowed travelers across the water, telling stories "
    "about storms, lost treasure, and the strange lights that sometimes danced above the "
    "hills at night."
)
#: A device like this CPU, measured (compute seconds per audio second).
CPU_POLICY = ChunkPolicy().with_rtf(0.6)
TOLERANCE_S = 0.120
#: At least 1/n of the paragraph's 40 words must be matched for its median to count. The
#: recogniser hears fast speech much worse, and how much depends on the decoder's noise: at
#: speed 1 it matched 34-35 words; at 1.5, over five seeds per chunk, 13-22 (speechd's engine,
#: noise drawn on the host) or 14-22 (KModel's own forward pass, torch's noise). The half asked
#: for before passed at 1.5 only because the old torch path's seeds happened to give 21.
HEARD = {1.0: 2, 1.5: 4}


@pytest.fixture(scope="module", params=RUNTIMES)
def engine(request: pytest.FixtureRequest, model_dir: Path) -> Iterator[Engine]:
    """Each runtime in turn (the ONNX one over the export cached in the model folder): word
    timing is the engine's, the same for both."""
    skip_unless_runs(request.param)
    yield load_engine(EngineConfig(model_dir=str(model_dir), device=DEVICE, engine=request.param))


def speak(engine: Engine, speed: float) -> tuple[npt.NDArray[np.float32], list[tuple[str, float]]]:
    """The paragraph's audio, chunk after chunk, and each word's start in it (seconds)."""
    chunks = engine.plan(PARAGRAPH, "af_heart", CPU_POLICY.with_speed(speed))
    assert len(chunks) >= 3  # several chunk joins, so cast-level times must add up
    pcm, starts, at = [], [], 0
    for chunk in chunks:
        synthesis = engine.synthesize(chunk, "af_heart", speed, seed=chunk.index)
        assert [w.text for w in synthesis.words] == chunk.text.split()
        starts += [(w.text, (at + w.start) / engine.sample_rate) for w in synthesis.words]
        pcm.append(synthesis.pcm)
        at += len(synthesis.pcm)
    return np.concatenate(pcm), starts


def segment(pcm: npt.NDArray[np.float32], rate: int) -> list[tuple[str, float]]:
    """pocketsphinx's words and their starts (seconds), free recognition (no reference)."""
    from pocketsphinx import Decoder

    n = len(pcm)
    m = n * 16_000 // rate
    spectrum = np.fft.rfft(pcm.astype(np.float64))  # band-limited resampling to 16 kHz
    resampled = np.fft.irfft(spectrum[: m // 2 + 1], m) * (m / n)
    raw = (np.clip(resampled, -1, 1) * 32767).astype("<i2").tobytes()
    decoder = Decoder(samprate=16_000, loglevel="FATAL")
    decoder.start_utt()
    decoder.process_raw(raw, full_utt=True)
    decoder.end_utt()
    frame_s = 1 / decoder.config["frate"]
    return [
        (re.sub(r"\(\d+\)$", "", s.word), s.start_frame * frame_s)
        for s in decoder.seg()
        if not s.word.startswith(("<", "["))
    ]


def _norm(word: str) -> str:
    return re.sub(r"[^a-z']", "", word.lower())


def deviations(ours: list[tuple[str, float]], theirs: list[tuple[str, float]]) -> list[float]:
    """|our start - their start| for the words both have, matched in order."""
    matcher = difflib.SequenceMatcher(
        a=[_norm(w) for w, _ in ours], b=[_norm(w) for w, _ in theirs], autojunk=False
    )
    return [
        abs(ours[block.a + k][1] - theirs[block.b + k][1])
        for block in matcher.get_matching_blocks()
        for k in range(block.size)
    ]


@pytest.mark.parametrize("speed", [1.0, 1.5])
def test_word_starts_agree_with_pocketsphinx(engine: Engine, speed: float) -> None:
    assert len(PARAGRAPH.split()) == 40
    pcm, ours = speak(engine, speed)
    starts = [s for _, s in ours]
    assert starts == sorted(starts) and starts[-1] < len(pcm) / engine.sample_rate
    devs = deviations(ours, segment(pcm, engine.sample_rate))
    median = float(np.median(devs))
    print(
        f"\n{engine.runtime}, speed {speed}: {len(devs)} of {len(ours)} words matched; start "
        f"deviation from pocketsphinx: median {median * 1000:.0f} ms, 90th percentile "
        f"{np.percentile(devs, 90) * 1000:.0f} ms, max {max(devs) * 1000:.0f} ms"
    )
    assert len(devs) >= len(ours) // HEARD[speed]  # enough words for the median to mean much
    assert median <= TOLERANCE_S
