"""The device the model tier runs on: `SPEECHD_TEST_DEVICE` (scripts/gpu_check.sh sets it to
`cuda`), else the CPU, which is what CI has; and the runtimes (torch, ONNX Runtime) that can
run on it here."""

from __future__ import annotations

import os
from typing import Any

import pytest

__all__ = ["DEVICE", "RUNTIMES", "FakeCuda", "FakeCudaOpener", "skip_unless_runs"]

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


class FakeCuda:
    """A runtime that stands for a CUDA device this machine lacks: a real CPU runtime
    underneath, saying it runs on `cuda:0`, that raises torch's own OutOfMemoryError (wrapped
    as the runtimes wrap it) for chunks longer than `fits` phonemes, or for every chunk while
    `full` is set, and that times speech `timing` times as long as the CPU does (0.73: the
    27% short durations of a broken CUDA build). Its name is not "torch", so nothing calls
    the real torch.cuda for it."""

    fingerprint = "fake-cuda"
    max_batch = 1  # one chunk at a time: batches are tests/engine/test_batch.py's

    def prepare_batch(self, max_items: int) -> None:
        """Nothing: it never batches."""

    def __init__(self, inner: Any, *, fits: int = 10_000, timing: float = 1.0) -> None:
        self._inner = inner
        self.name = "fake-cuda"
        self.device = "cuda:0"
        self.detail = f"a CPU runtime standing for cuda:0 ({inner.detail})"
        self.fits = fits
        self.timing = timing
        self.full = False
        self.calls: list[int] = []  # tokens per call, out of memory or not
        self.failed: list[int] = []

    def infer(self, tokens: Any, style: Any, speed: float, seed: int | None) -> Any:
        import torch

        from speechd.errors import CastFailed

        self.calls.append(len(tokens))
        if self.full or len(tokens) > self.fits:
            self.failed.append(len(tokens))
            try:
                raise torch.OutOfMemoryError(
                    "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 7.4 GiB total)"
                )
            except torch.OutOfMemoryError as exc:
                raise CastFailed(f"Synthesis failed on {self.device}: {exc}") from exc
        made = self._inner.infer(tokens, style, speed, seed)
        if self.timing == 1.0 or made.durations is None:
            return made
        # Every token's frames times `timing`, the rounding carried along (so even a model
        # whose tokens all last one frame comes out `timing` as long), the audio cut to fit.
        import numpy as np

        from speechd.engine import SAMPLES_PER_FRAME

        ends = np.floor(np.cumsum(made.durations) * self.timing).astype(np.int64)
        durations = np.diff(ends, prepend=0)
        audio = made.audio[: int(durations.sum()) * SAMPLES_PER_FRAME]
        return type(made)(audio, durations)


class FakeCudaOpener:
    """`load_engine`'s `open_runtime` for a machine with a FakeCuda device: the real runtime
    of `engine` on the CPU for "cpu", a FakeCuda over another for any other device. Keeps
    every device runtime it opened (`opened`) and counts the CPU ones (`cpu_opens`)."""

    def __init__(self, model_dir: str, engine: str = "torch", **fake: Any) -> None:
        self._model_dir = model_dir
        self._engine = engine
        self._fake = fake
        self.opened: list[FakeCuda] = []
        self.cpu_opens = 0

    def _cpu(self) -> Any:
        from speechd.engine import EngineConfig
        from speechd.engine._files import open_model_folder
        from speechd.engine._loading import _load_runtime

        config = EngineConfig(model_dir=self._model_dir, device="cpu", engine=self._engine)  # type: ignore[arg-type]
        return _load_runtime(config, open_model_folder(self._model_dir))

    def __call__(self, device: str) -> Any:
        if device == "cpu":
            self.cpu_opens += 1
            return self._cpu()
        fake = FakeCuda(self._cpu(), **self._fake)
        if self.opened:  # a reopened device keeps the state the test gave the last one
            last = self.opened[-1]
            fake.fits, fake.timing, fake.full = last.fits, last.timing, last.full
        self.opened.append(fake)
        return fake

    @property
    def device(self) -> FakeCuda:
        return self.opened[-1]
