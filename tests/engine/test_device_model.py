"""The device features on the real Kokoro-82M weights (tier `model`), on this CPU: unloading
frees most of the weights (RSS measured from a fresh process, both runtimes), and the sanity
check's figures as they are on real speech (a runtime that speaks as the CPU does passes; one
timing speech 27% short, as a JetPack 5 CUDA build was measured to, is refused)."""

from __future__ import annotations

from pathlib import Path

import pytest

from speechd.engine import EngineConfig, load_engine
from speechd.engine._files import open_model_folder
from speechd.engine._loading import _load_runtime, sanity_check
from tests.support.devices import RUNTIMES, FakeCuda

from .test_residency import assert_unload_frees_the_model, measure_unload

pytestmark = pytest.mark.model


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_unloading_the_model_frees_most_of_its_weights(model_dir: Path, runtime: str) -> None:
    weights = open_model_folder(model_dir).weights.stat().st_size
    assert_unload_frees_the_model(measure_unload(model_dir, runtime), weights)


def test_the_sanity_check_passes_the_same_speech_and_refuses_rushed_speech(
    model_dir: Path,
) -> None:
    config = EngineConfig(model_dir=str(model_dir), device="cpu", engine="torch")
    engine = load_engine(config)
    folder = open_model_folder(model_dir)
    onnx_config = EngineConfig(model_dir=str(model_dir), device="cpu", engine="onnx")
    onnx = _load_runtime(onnx_config, folder)
    torch = _load_runtime(config, folder)
    # ONNX Runtime against torch: the same speech in other arithmetic, as a sound GPU is.
    same = sanity_check(engine, onnx, torch)
    assert same.problem is None, same.describe()
    assert abs(same.duration_ratio - 1) < 0.01 and same.spectrum_db < 0.5
    rushed = sanity_check(engine, FakeCuda(torch, timing=0.73), torch)
    assert rushed.problem is not None
    assert "cuda:0 predicts durations 27% shorter than the CPU" in rushed.problem
