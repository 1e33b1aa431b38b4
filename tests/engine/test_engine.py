"""The synthesis path on a tiny, randomly initialised Kokoro (real code, noise for audio),
and loading errors."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import numpy as np
import pytest

from speechd.engine import (
    MODEL_MAX_TOKENS,
    SAMPLE_RATE,
    Chunk,
    Engine,
    EngineConfig,
    Synthesis,
    load_engine,
)
from speechd.errors import InvalidRequest, ModelUnavailable, UnknownVoice

from .conftest import make_tiny_model_dir


def first_chunk(engine: Engine, text: str = "Hello there, world.") -> Chunk:
    return engine.plan(text, "af_heart")[0]


def test_the_engine_reports_its_device_voices_and_rate(tiny_engine: Engine) -> None:
    assert tiny_engine.device == "cpu"
    assert tiny_engine.sample_rate == SAMPLE_RATE == 24_000
    assert "af_heart" in tiny_engine.voices.installed
    assert tiny_engine.voices.resolve("alloy") == "af_heart"


def test_synthesis_gives_float32_mono_pcm_and_its_duration(tiny_engine: Engine) -> None:
    result = tiny_engine.synthesize(first_chunk(tiny_engine), "af_heart", 1.0, seed=1)
    assert isinstance(result, Synthesis)
    assert result.pcm.dtype == np.float32 and result.pcm.ndim == 1 and len(result.pcm) > 0
    assert np.isfinite(result.pcm).all()
    assert result.duration_s == pytest.approx(len(result.pcm) / 24_000)


def test_a_seed_reproduces_the_same_pcm_bit_for_bit(tiny_engine: Engine) -> None:
    import torch

    chunk = first_chunk(tiny_engine)
    state = torch.get_rng_state()
    a = tiny_engine.synthesize(chunk, "af_heart", 1.0, seed=42).pcm
    b = tiny_engine.synthesize(chunk, "af_heart", 1.0, seed=42).pcm
    c = tiny_engine.synthesize(chunk, "af_heart", 1.0, seed=43).pcm
    assert a.tobytes() == b.tobytes()
    assert a.tobytes() != c.tobytes()
    assert torch.equal(torch.get_rng_state(), state)  # the global generator is untouched


def test_without_a_seed_the_decoder_noise_differs(tiny_engine: Engine) -> None:
    chunk = first_chunk(tiny_engine)
    a = tiny_engine.synthesize(chunk, "af_heart", 1.0).pcm
    b = tiny_engine.synthesize(chunk, "af_heart", 1.0).pcm
    assert a.tobytes() != b.tobytes()


def test_speed_stretches_the_audio_and_is_validated(tiny_engine: Engine) -> None:
    chunk = first_chunk(tiny_engine)
    slow = tiny_engine.synthesize(chunk, "af_heart", 0.25, seed=1)
    normal = tiny_engine.synthesize(chunk, "af_heart", 1.0, seed=1)
    fast = tiny_engine.synthesize(chunk, "af_heart", 4.0, seed=1)
    assert slow.duration_s > normal.duration_s >= fast.duration_s
    for bad in (0.2, 4.5, float("nan"), float("inf")):
        with pytest.raises(InvalidRequest) as caught:
            tiny_engine.synthesize(chunk, "af_heart", bad)
        assert caught.value.param == "speed"


def test_a_blend_is_the_weighted_average_of_its_voices(tiny_engine: Engine) -> None:
    chunk = first_chunk(tiny_engine)
    blend = tiny_engine.synthesize(chunk, "af_sky(3)+af_bella(1)", 1.0, seed=5).pcm
    mixed = tiny_engine.synthesize(chunk, "af_mix", 1.0, seed=5).pcm  # 0.25 bella + 0.75 sky
    alone = tiny_engine.synthesize(chunk, "af_sky", 1.0, seed=5).pcm
    assert len(blend) == len(mixed)
    assert np.allclose(blend, mixed, atol=1e-4)
    assert len(alone) != len(blend) or not np.allclose(alone, blend, atol=1e-4)


def test_any_installed_voice_reads_any_planned_chunk(tiny_engine: Engine) -> None:
    chunk = first_chunk(tiny_engine)  # English phonemes...
    assert len(tiny_engine.synthesize(chunk, "jf_alpha", 1.0, seed=1).pcm) > 0  # ...any voice


def test_unknown_voices_and_bad_chunks_are_invalid_requests(tiny_engine: Engine) -> None:
    chunk = first_chunk(tiny_engine)
    with pytest.raises(UnknownVoice):
        tiny_engine.synthesize(chunk, "xx_nobody", 1.0)
    with pytest.raises(UnknownVoice):
        tiny_engine.plan("Hello", "xx_nobody")
    for phonemes in ("", "a" * (MODEL_MAX_TOKENS + 1)):
        with pytest.raises(InvalidRequest) as caught:
            tiny_engine.synthesize(Chunk(0, "x", phonemes), "af_heart", 1.0)
        assert caught.value.param == "input"


@pytest.mark.slow
def test_the_longest_chunk_the_model_takes_synthesizes(tiny_engine: Engine) -> None:
    phonemes = ("h\u02c8\u025blO w\u02c8\u025c\u0279ld " * 60)[:MODEL_MAX_TOKENS].strip()
    result = tiny_engine.synthesize(Chunk(0, "hello world", phonemes), "af_heart", 1.0, seed=0)
    assert len(result.pcm) > 0


@pytest.mark.skipif(
    importlib.util.find_spec("pyopenjtalk") is not None, reason="misaki[ja] is installed here"
)
def test_a_language_whose_g2p_is_missing_is_an_invalid_voice(tiny_engine: Engine) -> None:
    with pytest.raises(InvalidRequest) as caught:
        tiny_engine.plan("こんにちは", "jf_alpha")
    assert caught.value.param == "voice" and "misaki[ja]" in caught.value.message


def test_warm_up_runs(tiny_engine: Engine) -> None:
    tiny_engine.warm_up()


# ------------------------------------------------------------------ loading


def test_config_is_a_validated_wire_shape() -> None:
    config = msgspec.json.decode(b'{"model_dir": "/m", "threads": 2}', type=EngineConfig)
    assert config.device == "auto" and config.default_voice == "af_heart"
    assert config.voice_map["alloy"] == "af_alloy"
    for bad in (b'{"threads": 0}', b'{"device": "tpu"}', b'{"colour": 1}'):
        with pytest.raises(msgspec.ValidationError):
            msgspec.json.decode(bad, type=EngineConfig)


def test_a_missing_folder_says_what_to_set(tmp_path: Path) -> None:
    with pytest.raises(ModelUnavailable) as caught:
        load_engine(EngineConfig(model_dir=str(tmp_path / "nowhere")))
    assert "SPEECHD_MODEL_DIR" in caught.value.message and "--model-dir" in caught.value.message


def test_an_incomplete_folder_names_what_is_missing(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({}))
    with pytest.raises(ModelUnavailable) as caught:
        load_engine(EngineConfig(model_dir=str(tmp_path)))
    assert "kokoro-v1_0.pth" in caught.value.message and "voices/*.pt" in caught.value.message


def test_a_default_voice_that_is_not_installed_fails_the_load(tiny_model_dir: Path) -> None:
    with pytest.raises(ModelUnavailable) as caught:
        load_engine(EngineConfig(model_dir=str(tiny_model_dir), default_voice="am_nobody"))
    assert "am_nobody" in caught.value.message


def test_broken_weights_are_model_unavailable(tmp_path: Path) -> None:
    root = make_tiny_model_dir(tmp_path / "model", ("af_heart",))
    (root / "kokoro-v1_0.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(ModelUnavailable):
        load_engine(EngineConfig(model_dir=str(root), device="cpu"))


def test_cuda_when_there_is_none_is_model_unavailable(tiny_model_dir: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(ModelUnavailable, match="CUDA"):
        load_engine(EngineConfig(model_dir=str(tiny_model_dir), device="cuda"))


_LOAD_WITHOUT_FOLDER = """
import time
from speechd.engine import EngineConfig, load_engine
from speechd.errors import ModelUnavailable
started = time.monotonic()
try:
    load_engine(EngineConfig())
except ModelUnavailable as exc:
    assert "SPEECHD_MODEL_DIR" in exc.message, exc.message
    print(round(time.monotonic() - started, 2))
else:
    raise SystemExit("loaded?!")
"""


@pytest.mark.parametrize(
    "env",
    [
        {"HF_HUB_OFFLINE": "1"},
        # Online but refused: huggingface_hub alone would retry for ~30 s.
        {"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9"},
    ],
    ids=["offline", "refused"],
)
def test_no_folder_and_no_hub_fails_within_seconds(tmp_path: Path, env: dict[str, str]) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _LOAD_WITHOUT_FOLDER],
        env={**os.environ, "HF_HOME": str(tmp_path / "hf"), **env},
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert float(done.stdout.strip()) < 10
    assert time.monotonic() - started < 30  # including the interpreter's start


@pytest.mark.parametrize(
    ("ending", "pause_s"), [("sentence", 0.35), ("clause", 0.2), ("word", 0.04)]
)
def test_padding_is_cut_to_a_pause_that_fits_the_chunk_end(ending: str, pause_s: float) -> None:
    from speechd.engine._engine import _trim

    rate = 24_000
    # start marker 14 frames, a voice from 0.3 s to 1.0 s, silence to 1.5 s, end marker 4.
    durations = [14, 20, 20, 6, 4]
    pcm = np.zeros(sum(durations) * 600, dtype=np.float32)
    t = np.arange(int(0.7 * rate)) / rate
    pcm[int(0.3 * rate) : int(1.0 * rate)] = 0.3 * np.sin(2 * np.pi * 220 * t)
    out, head = _trim(pcm, durations, ending)
    assert head == pytest.approx(0.25 * rate, abs=2)  # where the kept PCM began: 50 ms early
    voiced = np.flatnonzero(np.abs(out) > 1e-3)
    assert voiced[0] / rate == pytest.approx(0.05, abs=0.01)  # 50 ms kept before the voice
    assert (len(out) - voiced[-1]) / rate == pytest.approx(pause_s, abs=0.01)
    assert out[0] == 0.0 and abs(out[-1]) < 1e-6  # faded edges
    whole, head = _trim(pcm, [1, 2], ending)
    assert (len(whole), head) == (len(pcm), 0)  # unknown layout: returned whole


@pytest.mark.skipif(
    importlib.util.find_spec("pyopenjtalk") is not None, reason="misaki[ja] is installed here"
)
def test_a_default_voice_without_its_g2p_fails_the_load(tiny_model_dir: Path) -> None:
    with pytest.raises(ModelUnavailable, match="misaki"):
        load_engine(EngineConfig(model_dir=str(tiny_model_dir), default_voice="jf_alpha"))
