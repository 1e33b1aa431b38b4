"""On a CUDA machine only (`gpu` marker; scripts/gpu_check.sh runs these with the model
tier): the engine on cuda:N, its warm-up, the device past the last one, NVML's figures.
Never run here: the test machine has no GPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from speechd.engine import EngineConfig, load_engine
from speechd.errors import ModelUnavailable
from speechd.telemetry import start_telemetry
from speechd.telemetry._nvml import NvmlSource

pytestmark = [pytest.mark.gpu, pytest.mark.model]


def test_the_engine_runs_on_the_cuda_device_it_was_given(
    model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import torch

    caplog.set_level("INFO", logger="speechd.engine")

    last = torch.cuda.device_count() - 1
    engine = load_engine(EngineConfig(model_dir=str(model_dir), device=f"cuda:{last}"))
    assert engine.device == f"cuda:{last}" and torch.cuda.current_device() == last
    chunk = engine.plan("Hello from the graphics card.", "af_heart")[0]
    pcm = engine.synthesize(chunk, "af_heart", 1.0, seed=1).pcm
    assert pcm.dtype == np.float32 and np.isfinite(pcm).all() and len(pcm) > 12_000
    assert f"CUDA warm-up on cuda:{last}" in caplog.text  # the load warmed CUDA


def test_a_device_past_the_last_names_the_devices_there_are(model_dir: Path) -> None:
    import torch

    count = torch.cuda.device_count()
    with pytest.raises(ModelUnavailable, match=f"has {count} CUDA device"):
        load_engine(EngineConfig(model_dir=str(model_dir), device=f"cuda:{count}"))


def test_nvml_reads_the_gpu_the_worker_runs_on() -> None:
    pytest.importorskip("pynvml")
    source = NvmlSource.open("cuda:0")
    if source is None:
        pytest.skip("no NVML here (a Jetson: tegrastats instead)")
    try:
        sample = source.sample()
    finally:
        source.close()
    assert sample.gpu_percent is not None and (sample.memory_total_bytes or 0) > 2**30
    telemetry = start_telemetry("cuda:0", interval_s=0.1)
    try:
        telemetry.tick()
        assert telemetry.reading().source in ("nvml", "tegrastats")
    finally:
        telemetry.close()
