"""The torch runtime's fused decoder (`_torch_fused`, `--graph fused`, what `auto` gives torch):
the same durations and the same audio as kokoro's own modules to float rounding, a fingerprint
of its own (its bits are not the unfused modules'), and batches unchanged (the batched halves
never call the fused forwards)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from speechd.engine import BatchItem, Engine, EngineConfig, load_engine
from speechd.errors import ModelUnavailable


@pytest.fixture(scope="module")
def fused(tiny_model_dir: Path) -> Engine:
    config = EngineConfig(
        model_dir=str(tiny_model_dir), device="cpu", engine="torch", graph="fused"
    )
    return load_engine(config)


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sqrt(np.mean((a - b) ** 2) / max(np.mean(b**2), 1e-20)))


def test_the_fused_decoder_speaks_as_kokoros_modules_do(fused: Engine, tiny_engine: Engine) -> None:
    for text, voice, speed in (
        ("The old man walked slowly along the quiet beach.", "af_heart", 1.0),
        ("Quick.", "am_adam", 1.3),
    ):
        (chunk,) = tiny_engine.plan(text, voice)[:1]
        alone = tiny_engine.synthesize(chunk, voice, speed, seed=5)
        mine = fused.synthesize(chunk, voice, speed, seed=5)
        assert mine.durations == alone.durations
        assert len(mine.pcm) == len(alone.pcm)
        assert _relative(mine.pcm, alone.pcm) < 1e-3


def test_it_says_so_in_its_fingerprint_and_detail(fused: Engine, tiny_engine: Engine) -> None:
    assert fused.graph == "fused" and tiny_engine.graph == "float"
    assert fused.fingerprint.endswith(":torch:fused")
    assert tiny_engine.fingerprint.endswith(":torch")
    assert "fused decoder" in fused.detail


def test_a_batch_on_the_fused_model_is_each_item_as_alone(fused: Engine) -> None:
    chunks = [
        fused.plan("A short one.", "af_heart")[0],
        fused.plan("And a somewhat longer sentence to batch with it.", "af_heart")[0],
    ]
    items = [BatchItem(c, "af_heart", 1.0, n) for n, c in enumerate(chunks)]
    together = fused.synthesize_batch(items)
    for item, made in zip(items, together, strict=True):
        alone = fused.synthesize(item.chunk, item.voice, item.speed, seed=item.seed)
        assert not isinstance(made, Exception)
        assert made.durations == alone.durations
        assert _relative(made.pcm[: len(alone.pcm)], alone.pcm) < 0.03


def test_torch_has_no_int8_graph(tiny_model_dir: Path) -> None:
    config = EngineConfig(model_dir=str(tiny_model_dir), device="cpu", engine="torch", graph="int8")
    with pytest.raises(ModelUnavailable, match="--graph int8 is ONNX Runtime's on a CPU"):
        load_engine(config)
