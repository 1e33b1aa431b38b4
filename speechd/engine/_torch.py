"""The torch runtime: Kokoro's own KModel layers, run eagerly in two halves (`_split`), and
for a batch of chunks, the same layers padded and masked (`_split_batch`).

torch and kokoro are imported only in `load_torch_runtime`, in the worker.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import numpy.typing as npt

from speechd.errors import CastFailed, ModelUnavailable, SpeechdError

from ._device import resolve_device
from ._files import ModelFolder
from ._runtime import (
    MAX_BATCH,
    Inference,
    Request,
    infer_batch_in_two_stages,
    infer_in_two_stages,
)
from ._stop import Stop

__all__ = ["TorchRuntime", "load_torch_runtime", "quiet_third_party"]


class quiet_third_party(warnings.catch_warnings):
    """Silence the deprecation noise torch, kokoro and misaki emit while loading (their
    code, not ours: weight_norm, LSTM dropout, importlib.resources.open_text, jit)."""

    def __enter__(self) -> None:
        super().__enter__()
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.nn\.utils")
        warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.nn\.modules\.rnn")
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"misaki\.")
        warnings.filterwarnings(
            "ignore", category=DeprecationWarning, module=r"(torch\.jit|curated_transformers)"
        )


class TorchRuntime:
    name = "torch"
    max_batch = MAX_BATCH

    def __init__(
        self, front: Any, back: Any, batched: Any, device: str, threads: int, graph: str = "float"
    ) -> None:
        self._front = front
        self._back = back
        self._front_batch, self._back_batch = batched
        self.device = device
        self.graph = graph
        """"float": kokoro's modules as they are; "fused": with the decoder's float rewrites
        (`_torch_fused`), whose audio differs by rounding, so the fingerprint names it."""
        self.fingerprint = "torch" if graph == "float" else f"torch:{graph}"
        detail = f"torch {_torch().__version__} on {device}, {threads} threads"
        self.detail = detail if graph == "float" else f"{detail}, {graph} decoder"
        self.checkpoints = _Checkpoints()

    @contextmanager
    def stoppable(self, stop: Stop) -> Iterator[None]:
        self.checkpoints.stop = stop
        try:
            yield
        finally:
            self.checkpoints.stop = None

    def infer(
        self, tokens: Sequence[int], style: npt.NDArray[np.float32], speed: float, seed: int | None
    ) -> Inference:
        torch = _torch()
        try:
            with torch.inference_mode():
                return infer_in_two_stages(self, tokens, style, speed, seed)
        except (RuntimeError, AssertionError) as exc:  # torch errors, incl. out of memory
            raise CastFailed(f"Synthesis failed on {self.device}: {exc}") from exc

    def prepare_batch(self, max_items: int) -> None:
        """Nothing to do: the batched halves share the model's weights."""

    def infer_batch(self, requests: Sequence[Request]) -> list[Inference]:
        torch = _torch()
        try:
            with torch.inference_mode():
                return infer_batch_in_two_stages(self, requests)
        except (RuntimeError, AssertionError) as exc:
            raise CastFailed(f"Batched synthesis failed on {self.device}: {exc}") from exc

    def front(
        self, input_ids: npt.NDArray[np.int64], style: npt.NDArray[np.float32], speed: float
    ) -> tuple[npt.NDArray[np.int64], Any]:
        torch = _torch()
        ids = torch.from_numpy(input_ids).to(self.device)
        ref = torch.from_numpy(style).to(self.device)
        rate = torch.tensor([speed], dtype=torch.float32, device=self.device)
        durations, d, t_en = self._front(ids, ref, rate)
        return durations.cpu().numpy(), (d, t_en, ref)

    def back(
        self,
        state: Any,
        frames: npt.NDArray[np.int64],
        style: npt.NDArray[np.float32],
        phase: npt.NDArray[np.float32],
        noise: npt.NDArray[np.float32],
    ) -> npt.NDArray[np.float32]:
        torch = _torch()
        d, t_en, ref = state
        audio = self._back(
            d,
            t_en,
            torch.from_numpy(frames).to(self.device),
            ref,
            torch.from_numpy(phase).to(self.device),
            torch.from_numpy(noise).to(self.device),
        )
        return audio.to("cpu", torch.float32).numpy()


    def front_batch(
        self,
        input_ids: npt.NDArray[np.int64],
        lengths: npt.NDArray[np.int64],
        style: npt.NDArray[np.float32],
        speed: npt.NDArray[np.float32],
    ) -> tuple[npt.NDArray[np.int64], Any]:
        torch = _torch()
        ref = torch.from_numpy(style).to(self.device)
        durations, d, t_en = self._front_batch(
            torch.from_numpy(input_ids).to(self.device),
            torch.from_numpy(lengths),  # packing wants the lengths on the CPU
            ref,
            torch.from_numpy(speed).to(self.device),
        )
        return durations.cpu().numpy(), (d, t_en, ref)

    def back_batch(
        self,
        state: Any,
        frames: npt.NDArray[np.int64],
        frame_lengths: npt.NDArray[np.int64],
        style: npt.NDArray[np.float32],
        phase: npt.NDArray[np.float32],
        noise: npt.NDArray[np.float32],
    ) -> npt.NDArray[np.float32]:
        torch = _torch()
        d, t_en, ref = state
        audio = self._back_batch(
            d,
            t_en,
            torch.from_numpy(frames).to(self.device),
            torch.from_numpy(frame_lengths),
            ref,
            torch.from_numpy(phase).to(self.device),
            torch.from_numpy(noise).to(self.device),
        )
        return audio.to("cpu", torch.float32).numpy()


class _Checkpoints:
    """The forward pre-hook on every module of the model (`load_torch_runtime`): the call in
    flight ends there, before the module runs, once its `Stop` is set (the longest gap between
    two of them, a 10 s chunk's decoder tail, is about 0.1 s on a CPU). It holds nothing of
    the model or the runtime: a hook that did (a bound method of the runtime) would make a
    cycle that kept the weights alive after an unload until the garbage collector ran."""

    __slots__ = ("stop",)

    def __init__(self) -> None:
        self.stop: Stop | None = None

    def __call__(self, module: Any, args: Any) -> None:
        stop = self.stop
        if stop is not None:
            stop.check()


def _torch() -> Any:
    import torch

    return torch


def load_torch_runtime(
    folder: ModelFolder, device: str, threads: int | None, graph: str = "float"
) -> TorchRuntime:
    """KModel from `folder` on `device` ("auto", "cpu", "cuda", "cuda:N"; resolved to "cpu"
    or "cuda:N" by `resolve_device`), its decoder fused (`_torch_fused`) unless `graph` is
    "float" ("auto" and "fused" fuse it; torch has no "int8": ModelUnavailable)."""
    if graph == "int8":
        raise ModelUnavailable(
            "--graph int8 is ONNX Runtime's on a CPU; the torch engine speaks with float or "
            "fused (--engine onnx, or --graph auto)."
        )
    try:
        import torch

        with quiet_third_party():
            from kokoro import KModel

        from ._split import split_model
        from ._split_batch import split_batch_model
    except ImportError as exc:
        raise ModelUnavailable(f"The torch engine needs torch and kokoro installed: {exc}") from exc
    device = resolve_device(device, torch)
    if threads:
        torch.set_num_threads(threads)
    try:
        with quiet_third_party():
            model = KModel(
                repo_id="hexgrad/Kokoro-82M", config=str(folder.config), model=str(folder.weights)
            )
        model = model.to(device).eval()
        if graph != "float":
            from ._torch_fused import fuse

            with quiet_third_party():
                fuse(model)
    except SpeechdError:
        raise
    except Exception as exc:  # torch.load, json, a state dict that does not fit
        raise ModelUnavailable(f"Cannot load Kokoro-82M from {str(folder.root)!r}: {exc}") from exc
    front, back = split_model(model)
    batched = split_batch_model(model, back)  # the same weights: no memory of its own
    chosen = "float" if graph == "float" else "fused"
    runtime = TorchRuntime(front, back, batched, device, torch.get_num_threads(), chosen)
    for module in model.modules():
        module.register_forward_pre_hook(runtime.checkpoints)
    return runtime
