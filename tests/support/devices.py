"""The device the model tier runs on: `SPEECHD_TEST_DEVICE` (scripts/gpu_check.sh sets it to
`cuda`), else the CPU, which is what CI has; and the runtimes (torch, ONNX Runtime) that can
run on it here."""

from __future__ import annotations

import os

import pytest

__all__ = ["DEVICE", "RUNTIMES", "skip_unless_runs"]

DEVICE = os.environ.get("SPEECHD_TEST_DEVICE") or "cpu"
#: The engine's runtimes, as `EngineConfig.engine` names them.
RUNTIMES = ("torch", "onnx")


def skip_unless_runs(runtime: str) -> None:
    """Skip the test where `runtime` cannot run on DEVICE: ONNX Runtime on a CUDA device needs
    its CUDA provider (onnxruntime-gpu), which `.[test]`'s onnxruntime does not have."""
    if runtime != "onnx" or not DEVICE.startswith("cuda"):
        return
    import onnxruntime

    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        pytest.skip(f"this ONNX Runtime has no CUDA provider for {DEVICE}")
