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
    SAMPLE_RATE,
    SAMPLES_PER_FRAME,
    Engine,
    EngineConfig,
    Synthesis,
    load_engine,
)
from speechd.errors import CastFailed, InvalidRequest, ModelUnavailable, UnknownVoice
from speechd.text import Chunk
from speechd.text._chunks import MODEL_MAX_TOKENS
from tests.support.tiny_model import make_tiny_model_dir


def first_chunk(engine: Engine, text: str = "Hello there, world.") -> Chunk:
    return engine.plan(text, "af_heart")[0]


# ------------------------------------------------------------------ the contract, on both


def test_the_engine_reports_its_runtime_device_voices_and_rate(engine: Engine) -> None:
    assert engine.runtime in ("torch", "onnx") and engine.device == "cpu"
    assert engine.runtime in engine.detail.lower()
    assert engine.sample_rate == SAMPLE_RATE == 24_000
    assert "af_heart" in engine.voices.installed
    assert engine.voices.resolve("alloy") == "af_heart"


def test_the_fingerprint_names_the_weights_and_the_runtime(engine: Engine) -> None:
    weights = "kokoro-v1_0.pth"
    assert engine.fingerprint.startswith(f"kokoro:{weights}:")
    assert engine.fingerprint.endswith(f":{engine.runtime}")


def test_synthesis_gives_float32_mono_pcm_and_its_duration(engine: Engine) -> None:
    result = engine.synthesize(first_chunk(engine), "af_heart", 1.0, seed=1)
    assert isinstance(result, Synthesis)
    assert result.pcm.dtype == np.float32 and result.pcm.ndim == 1 and len(result.pcm) > 0
    assert np.isfinite(result.pcm).all()
    assert result.duration_s == pytest.approx(len(result.pcm) / 24_000)


def test_synthesis_carries_the_predicted_durations_and_the_trim(engine: Engine) -> None:
    chunk = first_chunk(engine)
    result = engine.synthesize(chunk, "af_heart", 1.0, seed=1)
    assert result.tokens == chunk.phonemes  # every character is in the tiny vocabulary
    assert len(result.durations) == len(result.tokens) + 2  # the markers around them
    assert all(isinstance(d, int) and d >= 1 for d in result.durations)
    made = sum(result.durations) * SAMPLES_PER_FRAME
    assert result.head >= 0 and result.head + len(result.pcm) <= made


def test_a_seed_reproduces_the_same_pcm_bit_for_bit(engine: Engine) -> None:
    import torch

    chunk = first_chunk(engine)
    state = torch.get_rng_state()
    a = engine.synthesize(chunk, "af_heart", 1.0, seed=42).pcm
    b = engine.synthesize(chunk, "af_heart", 1.0, seed=42).pcm
    c = engine.synthesize(chunk, "af_heart", 1.0, seed=43).pcm
    assert a.tobytes() == b.tobytes()
    assert a.tobytes() != c.tobytes()
    assert torch.equal(torch.get_rng_state(), state)  # the global generator is untouched


def test_without_a_seed_the_decoder_noise_differs(engine: Engine) -> None:
    chunk = first_chunk(engine)
    a = engine.synthesize(chunk, "af_heart", 1.0).pcm
    b = engine.synthesize(chunk, "af_heart", 1.0).pcm
    assert a.tobytes() != b.tobytes()


def test_speed_stretches_the_audio_and_is_validated(engine: Engine) -> None:
    chunk = first_chunk(engine)
    slow = engine.synthesize(chunk, "af_heart", 0.25, seed=1)
    normal = engine.synthesize(chunk, "af_heart", 1.0, seed=1)
    fast = engine.synthesize(chunk, "af_heart", 4.0, seed=1)
    assert slow.duration_s > normal.duration_s >= fast.duration_s
    assert sum(slow.durations) > sum(normal.durations) >= sum(fast.durations)
    for bad in (0.2, 4.5, float("nan"), float("inf")):
        with pytest.raises(InvalidRequest) as caught:
            engine.synthesize(chunk, "af_heart", bad)
        assert caught.value.param == "speed"


def test_a_blend_is_the_weighted_average_of_its_voices(engine: Engine) -> None:
    chunk = first_chunk(engine)
    blend = engine.synthesize(chunk, "af_sky(3)+af_bella(1)", 1.0, seed=5).pcm
    mixed = engine.synthesize(chunk, "af_mix", 1.0, seed=5).pcm  # 0.25 bella + 0.75 sky
    alone = engine.synthesize(chunk, "af_sky", 1.0, seed=5).pcm
    assert len(blend) == len(mixed)
    assert np.allclose(blend, mixed, atol=1e-4)
    assert len(alone) != len(blend) or not np.allclose(alone, blend, atol=1e-4)


def test_any_installed_voice_reads_any_planned_chunk(engine: Engine) -> None:
    chunk = first_chunk(engine)  # English phonemes...
    assert len(engine.synthesize(chunk, "jf_alpha", 1.0, seed=1).pcm) > 0  # ...any voice


def test_unknown_voices_and_bad_chunks_are_invalid_requests(engine: Engine) -> None:
    chunk = first_chunk(engine)
    with pytest.raises(UnknownVoice):
        engine.synthesize(chunk, "xx_nobody", 1.0)
    with pytest.raises(UnknownVoice):
        engine.plan("Hello", "xx_nobody")
    for phonemes in ("", "a" * (MODEL_MAX_TOKENS + 1)):
        with pytest.raises(InvalidRequest) as caught:
            engine.synthesize(Chunk(0, "x", phonemes), "af_heart", 1.0)
        assert caught.value.param == "input"


def test_a_runtime_failure_is_a_failed_cast(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from speechd.engine import _runtime

    def fail(*_: object) -> None:
        raise RuntimeError("out of memory")  # what torch raises; ONNX Runtime's kinds too

    monkeypatch.setattr(_runtime, "excitation", fail)
    with pytest.raises(CastFailed, match="out of memory"):
        engine.synthesize(first_chunk(engine), "af_heart", 1.0, seed=1)


@pytest.mark.slow
def test_the_longest_chunk_the_model_takes_synthesizes(engine: Engine) -> None:
    phonemes = ("h\u02c8\u025blO w\u02c8\u025c\u0279ld " * 60)[:MODEL_MAX_TOKENS].strip()
    result = engine.synthesize(Chunk(0, "hello world", phonemes), "af_heart", 1.0, seed=0)
    assert len(result.pcm) > 0


@pytest.mark.skipif(
    importlib.util.find_spec("pyopenjtalk") is not None, reason="misaki[ja] is installed here"
)
def test_a_language_whose_g2p_is_missing_is_an_invalid_voice(engine: Engine) -> None:
    with pytest.raises(InvalidRequest) as caught:
        engine.plan("こんにちは", "jf_alpha")
    assert caught.value.param == "voice" and "misaki[ja]" in caught.value.message


def test_warm_up_runs(engine: Engine) -> None:
    engine.warm_up()


# ------------------------------------------------------------------ the two runtimes agree


def test_both_runtimes_make_the_same_audio_from_the_same_seed(
    tiny_engine: Engine, tiny_onnx_engine: Engine
) -> None:
    chunk = first_chunk(tiny_engine, "Hello there, world. This is a test of two runtimes.")
    for speed, voice in ((1.0, "af_heart"), (0.5, "af_sky(3)+af_bella(1)")):
        a = tiny_engine.synthesize(chunk, voice, speed, seed=9)
        b = tiny_onnx_engine.synthesize(chunk, voice, speed, seed=9)
        assert a.durations == b.durations and a.head == b.head
        assert len(a.pcm) == len(b.pcm)
        assert a.words and [w.start for w in a.words] == [w.start for w in b.words]
        peak = float(np.max(np.abs(a.pcm)))
        assert float(np.max(np.abs(a.pcm - b.pcm))) < 1e-3 * peak  # float rounding, no more


def test_a_cast_resumed_on_the_other_runtime_keeps_nothing(
    tiny_engine: Engine, tiny_onnx_engine: Engine
) -> None:
    """Same weights, other runtime: the same speech but not the same bits, so the fingerprint
    a new attempt compares (the worker keeps earlier chunks only under an equal one) differs."""
    from speechd.worker._plan import model_fingerprint

    torch_print, onnx_print = model_fingerprint(tiny_engine), model_fingerprint(tiny_onnx_engine)
    assert torch_print and onnx_print and torch_print != onnx_print
    assert torch_print.rsplit(":", 1)[0] == onnx_print.rsplit(":", 1)[0]  # the same weights


def test_an_onnx_worker_never_imports_torch(tiny_model_dir: Path, tiny_onnx_engine: Engine) -> None:
    code = (
        "import sys\n"
        "from speechd.engine import EngineConfig, load_engine\n"
        f"e = load_engine(EngineConfig(model_dir={str(tiny_model_dir)!r}, engine='onnx'))\n"
        "e.warm_up()\n"
        "heavy = [m for m in ('torch', 'kokoro', 'transformers') if sys.modules.get(m)]\n"
        "assert not heavy, heavy\n"
        "assert e.runtime == 'onnx' and e.device == 'cpu', e\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]


# ------------------------------------------------------------------ loading


def test_config_is_a_validated_wire_shape() -> None:
    config = msgspec.json.decode(b'{"model_dir": "/m", "threads": 2}', type=EngineConfig)
    assert config.device == "auto" and config.default_voice == "af_heart"
    assert config.voice_map["alloy"] == "af_alloy"
    assert (config.engine, config.onnx_model, config.cache_dir) == ("auto", None, None)
    for bad in (b'{"threads": 0}', b'{"device": "tpu"}', b'{"colour": 1}', b'{"engine": "tf"}'):
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
        load_engine(
            EngineConfig(model_dir=str(tiny_model_dir), default_voice="am_nobody", engine="torch")
        )
    assert "am_nobody" in caught.value.message


def test_broken_weights_are_model_unavailable(tmp_path: Path) -> None:
    root = make_tiny_model_dir(tmp_path / "model", ("af_heart",))
    (root / "kokoro-v1_0.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(ModelUnavailable):  # the ONNX export of them: tests/engine/test_onnx.py
        load_engine(EngineConfig(model_dir=str(root), device="cpu", engine="torch"))


@pytest.mark.parametrize("runtime", ["torch", "onnx"])
def test_cuda_when_there_is_none_is_model_unavailable(tiny_model_dir: Path, runtime: str) -> None:
    import onnxruntime
    import torch

    if (
        torch.cuda.is_available()
        or "CUDAExecutionProvider" in onnxruntime.get_available_providers()
    ):
        pytest.skip("CUDA is available here")
    with pytest.raises(ModelUnavailable, match="CUDA"):
        load_engine(EngineConfig(model_dir=str(tiny_model_dir), device="cuda", engine=runtime))


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
    from speechd.engine._trim import trim_silence as _trim

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
        load_engine(
            EngineConfig(model_dir=str(tiny_model_dir), default_voice="jf_alpha", engine="torch")
        )
