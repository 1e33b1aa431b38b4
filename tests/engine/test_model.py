"""The real Kokoro-82M weights (tier `model`), on both runtimes: speech of the right length
and loudness, words an offline recogniser can read back, and the same speech from torch and
ONNX Runtime.

Two voices, on purpose. The issue asks for jf_alpha: its English is heavily accented (word
recall 15-47% in ../shared/kokoro-weights/README.md), so it gets the duration and energy
checks only. Recognition runs with am_adam (and af_heart), where pocketsphinx recovers
85-100% of the words, so a failure means broken audio rather than an accent. Both read
phonemes planned by the English G2P: planning follows the plan voice's language, and
misaki[ja] is not installed here, while synthesis takes any voice for any chunk.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from speechd.engine import SAMPLE_RATE, Engine, EngineConfig, Synthesis, load_engine
from speechd.text import Chunk, ChunkPolicy
from tests.support.devices import DEVICE, RUNTIMES, skip_unless_runs

pytestmark = pytest.mark.model

SENTENCE_15 = "The old man walked slowly along the quiet beach as the sun went down tonight."
CANDIDATES = [
    SENTENCE_15,
    "My sister bought a red bicycle at the market near the train station yesterday.",
    "Please remember to water the plants and feed the cat before you leave the house.",
    "Scientists discovered a new species of frog living deep inside the rainforest.",
]
#: A device like this CPU, measured (compute seconds per audio second).
CPU_POLICY = ChunkPolicy().with_rtf(0.6)


class _Engines(dict[str, Engine]):
    """The runtimes on the real weights, each loaded when first asked for (the ONNX one exports
    them once, ~30 s, into the model folder's speechd-onnx/, where later runs find it); a
    runtime that cannot run on the test device here skips the test asking for it."""

    def __init__(self, model_dir: Path) -> None:
        super().__init__()
        self._model_dir = model_dir

    def __missing__(self, runtime: str) -> Engine:
        skip_unless_runs(runtime)
        config = EngineConfig(model_dir=str(self._model_dir), device=DEVICE, engine=runtime)
        engine = self[runtime] = load_engine(config)
        return engine


@pytest.fixture(scope="module")
def engines(model_dir: Path) -> Iterator[dict[str, Engine]]:
    yield _Engines(model_dir)


@pytest.fixture(params=RUNTIMES)
def engine(request: pytest.FixtureRequest, engines: dict[str, Engine]) -> Engine:
    return engines[request.param]


def speak(engine: Engine, text: str, voice: str, policy: ChunkPolicy) -> npt.NDArray[np.float32]:
    chunks = engine.plan(text, "af_heart", policy)
    assert len(chunks) >= 2  # the joins between chunks are part of what is checked
    pcm = [engine.synthesize(c, voice, 1.0, seed=c.index).pcm for c in chunks]
    return np.concatenate(pcm)


def test_jf_alpha_speaks_a_15_word_sentence_in_3_5_to_7_5_seconds(engine: Engine) -> None:
    assert len(SENTENCE_15.split()) == 15
    pcm = speak(engine, SENTENCE_15, "jf_alpha", CPU_POLICY)
    duration = len(pcm) / engine.sample_rate
    assert 3.5 <= duration <= 7.5
    rms = float(np.sqrt(np.mean(pcm**2)))
    assert 0.01 < rms < 0.5
    assert float(np.max(np.abs(pcm))) <= 1.0
    power = np.abs(np.fft.rfft(pcm)) ** 2
    freqs = np.fft.rfftfreq(len(pcm), 1 / engine.sample_rate)
    speech_band = power[(freqs >= 300) & (freqs <= 3400)].sum() / power.sum()
    assert speech_band > 0.35  # most of the energy where speech is; noise would be flat
    # Speech pauses: not one long hum, and no dead air longer than a sentence break.
    frames = pcm[: len(pcm) // 480 * 480].reshape(-1, 480)  # 20 ms
    loud = np.sqrt(np.mean(frames**2, axis=1)) > 0.1 * rms
    assert 0.4 < loud.mean() < 0.98
    assert _longest_run(~loud) * 0.02 < 0.8


def test_a_recogniser_picks_the_right_sentence(engine: Engine) -> None:
    for target, voice in ((0, "am_adam"), (1, "af_heart")):
        pcm = speak(engine, CANDIDATES[target], voice, CPU_POLICY)
        heard = _transcribe(pcm, engine.sample_rate)
        recalls = [_recall(candidate, heard) for candidate in CANDIDATES]
        assert int(np.argmax(recalls)) == target, (voice, heard, recalls)
        assert recalls[target] >= 0.7, (voice, heard, recalls)


def test_both_runtimes_are_as_intelligible_and_time_speech_alike(
    engines: dict[str, Engine], model_dir: Path
) -> None:
    """Issue 19's bar: recall within 0.03 and total duration within 2%, torch against ONNX
    Runtime, and speechd's torch path against KModel's own forward pass (the noise drawn by
    torch, the start marker decoded in full), so the split itself loses nothing."""
    recalls: dict[str, list[float]] = {"torch": [], "onnx": [], "kmodel": []}
    seconds: dict[str, float] = dict.fromkeys(recalls, 0.0)
    kmodel = _kmodel_forward(engines["torch"], model_dir)
    for voice in ("am_adam", "af_heart"):
        for text in CANDIDATES:
            chunks = engines["torch"].plan(text, "af_heart", CPU_POLICY)
            for name, synthesize in (
                ("torch", engines["torch"].synthesize),
                ("onnx", engines["onnx"].synthesize),
                ("kmodel", kmodel),
            ):
                pcm = np.concatenate([synthesize(c, voice, 1.0, seed=c.index).pcm for c in chunks])
                recalls[name].append(_recall(text, _transcribe(pcm, SAMPLE_RATE)))
                seconds[name] += len(pcm) / SAMPLE_RATE
    mean = {name: float(np.mean(r)) for name, r in recalls.items()}
    assert mean["torch"] >= 0.8, recalls
    assert abs(mean["onnx"] - mean["torch"]) <= 0.03, recalls
    assert abs(mean["torch"] - mean["kmodel"]) <= 0.03, recalls
    assert seconds["onnx"] == pytest.approx(seconds["torch"], rel=0.02), seconds
    assert seconds["torch"] == pytest.approx(seconds["kmodel"], rel=0.02), seconds


def _kmodel_forward(engine: Engine, model_dir: Path) -> Callable[..., Synthesis]:
    """Synthesis as the engine made it before it was split: KModel.forward, trimmed."""
    import torch

    from speechd.engine._packs import read_pack
    from speechd.engine._torch import quiet_third_party
    from speechd.engine._trim import chunk_ending as _ending
    from speechd.engine._trim import trim_silence as _trim

    with quiet_third_party():
        from kokoro import KModel

        model = KModel(
            repo_id="hexgrad/Kokoro-82M",
            config=str(model_dir / "config.json"),
            model=str(model_dir / "kokoro-v1_0.pth"),
        ).eval()

    def synthesize(chunk: Chunk, voice: str, speed: float, *, seed: int) -> Synthesis:
        pack = read_pack(model_dir / "voices" / f"{voice}.pt")
        style = torch.from_numpy(pack[len(chunk.phonemes) - 1])
        with torch.random.fork_rng(), torch.inference_mode():
            torch.manual_seed(seed)
            out = model(chunk.phonemes, style, speed, return_output=True)
        pcm, _ = _trim(
            out.audio.numpy().reshape(-1), out.pred_dur.tolist(), _ending(chunk)
        )
        return Synthesis(pcm)

    return synthesize


def _longest_run(mask: npt.NDArray[np.bool_]) -> int:
    best = run = 0
    for value in mask:
        run = run + 1 if value else 0
        best = max(best, run)
    return best


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


def _recall(reference: str, heard: str) -> float:
    got = set(_words(heard))
    words = _words(reference)
    return sum(w in got for w in words) / len(words)


def _transcribe(pcm: npt.NDArray[np.float32], rate: int) -> str:
    """pocketsphinx's bundled en-us model on 16 kHz signed 16-bit mono."""
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
    hypothesis = decoder.hyp()
    return hypothesis.hypstr if hypothesis is not None else ""
