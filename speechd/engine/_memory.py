"""The worker's device memory: the budget `--max-device-memory` sets, what the worker holds,
what to give back, and whether a runtime error was the device running out of memory.

The budget is a simple model of what one chunk needs: the weights where they live, plus
activations that grow with the chunk's audio (every layer of Kokoro's decoder works at the
frame or sample rate). From the room left after the weights follows the longest chunk a cast
may be cut into (`MemoryBudget.chunk_s`, which `ChunkPolicy.memory_chunk_s` carries into every
plan). Where torch runs on CUDA the cap is also the caching allocator's own limit
(`torch.cuda.set_per_process_memory_fraction`); ONNX Runtime's CUDA arena takes it as
`gpu_mem_limit`. Neither CUDA path has run on a GPU here: they are written from torch's and
ONNX Runtime's documentation.

    budget = MemoryBudget.plan(2 << 30, weights=folder_bytes, runtime="torch", device="cpu")
    budget.chunk_s           # the most audio one chunk may hold within 2 GiB
"""

from __future__ import annotations

import gc
import logging
import re
from dataclasses import dataclass
from typing import Any, Final

from speechd.errors import ModelUnavailable

from ._heap import HeapTrimmer

__all__ = [
    "ACTIVATION_BYTES_PER_AUDIO_S",
    "MIN_CHUNK_S",
    "MemoryBudget",
    "held_bytes",
    "out_of_memory",
    "parse_size",
    "release_device_memory",
]

log = logging.getLogger("speechd.engine")

#: Peak activation memory per second of one chunk's audio, by runtime. Measured on the CPU
#: here with the real weights (peak RSS over RSS before the chunk, chunks of 1 to 10 s at
#: speed 1 and 0.5): torch 44-98 MB/s, ONNX Runtime 11-22 MB/s (its arena given back after
#: every run, `_onnx`), the short chunks dearest. Rounded up, since a budget that is too
#: tight costs more chunks but one that is too loose costs an out-of-memory. On a CUDA
#: device torch measures its own at the warm-up (`measure_activations`).
ACTIVATION_BYTES_PER_AUDIO_S: Final = {"torch": 100 << 20, "onnx": 24 << 20}
#: The least audio a chunk must be able to hold within the budget: less, and the model
#: cannot speak a clause in one piece.
MIN_CHUNK_S: Final = 2.0

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)(?:i?b)?\s*", re.IGNORECASE)


def parse_size(value: str | int) -> int:
    """Bytes from `1073741824`, `512M`, `1.5G`, `2GiB` or `2GB` (binary units throughout:
    `1G` is 1024^3 bytes); ValueError with a one-line message for anything else."""
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    else:
        match = _SIZE.fullmatch(str(value)) if len(str(value)) <= 32 else None
        if match is None:
            raise ValueError(f"{value!r} is not a size (try 512M, 2G or a number of bytes)")
        size = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if size <= 0:
        raise ValueError(f"{value!r} is not a size: it must be more than 0 bytes")
    return size


def _mib(size: float) -> str:
    return f"{size / (1 << 20):.0f} MiB"


@dataclass(frozen=True)
class MemoryBudget:
    """What the worker may hold on its device (`limit`, bytes; None: no cap), what the
    weights take there, and activation bytes per second of one chunk's audio."""

    limit: int | None
    weights: int
    per_audio_s: int

    @classmethod
    def plan(
        cls,
        limit: int | None,
        *,
        weights: int,
        runtime: str,
        device: str,
        per_audio_s: int | None = None,
    ) -> MemoryBudget:
        """The budget for `runtime` on `device`; ModelUnavailable, in one line, when `limit`
        leaves no room for the weights and a chunk of `MIN_CHUNK_S`."""
        per_s = per_audio_s or ACTIVATION_BYTES_PER_AUDIO_S.get(runtime, max(
            ACTIVATION_BYTES_PER_AUDIO_S.values()))  # fmt: skip
        budget = cls(limit, weights, per_s)
        if limit is not None and budget.chunk_s < MIN_CHUNK_S:
            need = weights + MIN_CHUNK_S * per_s
            raise ModelUnavailable(
                f"--max-device-memory {_mib(limit)} is too little for the model on {device}: "
                f"its weights take {_mib(weights)} and a {MIN_CHUNK_S:g} s chunk "
                f"{_mib(MIN_CHUNK_S * per_s)} more (at least {_mib(need)} in all)."
            )
        return budget

    @property
    def chunk_s(self) -> float:
        """The most audio one chunk may hold within the limit (0.0: no cap)."""
        if self.limit is None:
            return 0.0
        return max(0.0, (self.limit - self.weights) / self.per_audio_s)

    def measured(self, per_audio_s: int) -> MemoryBudget:
        """This budget with activations as measured on the device."""
        return MemoryBudget(self.limit, self.weights, max(1, per_audio_s))


def out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` (or what it was raised from) is a device running out of memory.

    torch says so with a class of its own (`torch.OutOfMemoryError`, a RuntimeError). ONNX
    Runtime has none: its CUDA provider raises a RuntimeException whose message is the only
    sign (its maintainers say there is no better way to catch it, microsoft/onnxruntime#16307),
    so its known wordings are matched: the arena's "Failed to allocate memory", CUDA's "out
    of memory" (error 2) and cuDNN's "ALLOC_FAILED"."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        kind = type(current)
        if kind.__name__ == "OutOfMemoryError" and kind.__module__.startswith("torch"):
            return True
        text = str(current)
        if any(sign in text for sign in _OOM_SIGNS) or (
            "out of memory" in text.lower() and "cuda" in text.lower()
        ):
            return True
        current = current.__cause__ or current.__context__
    return False


#: ONNX Runtime's ways of saying a device allocation failed (its BFC arena; cuDNN's).
_OOM_SIGNS: Final = ("Failed to allocate memory", "CUDNN_STATUS_ALLOC_FAILED")


def _cuda_index(device: str) -> int | None:
    if not device.startswith("cuda"):
        return None
    return int(device.partition(":")[2] or 0)


def held_bytes(runtime: str, device: str) -> int | None:
    """Device memory the worker holds now, where its runtime can tell: torch on CUDA, its
    caching allocator's reserve. None elsewhere (ONNX Runtime does not say; on the CPU the
    process's RSS, which telemetry reports, is the figure)."""
    index = _cuda_index(device)
    if index is None or runtime != "torch":
        return None
    torch = _torch()
    try:
        return int(torch.cuda.memory_reserved(index))
    except (RuntimeError, AssertionError):
        return None


def cap_torch(device: str, limit: int) -> float | None:
    """Make `limit` bytes torch's caching allocator's cap on CUDA `device` (its per-process
    memory fraction of the device's total); the fraction set, or None off CUDA."""
    index = _cuda_index(device)
    if index is None:
        return None
    torch = _torch()
    total = int(torch.cuda.get_device_properties(index).total_memory)
    fraction = min(1.0, limit / total)
    torch.cuda.set_per_process_memory_fraction(fraction, index)
    log.info("torch on %s capped at %s (%.3f of %s)", device, _mib(limit), fraction, _mib(total))
    return fraction


def weights_on_device(runtime: str, device: str, fallback: int) -> int:
    """What the loaded weights take on `device`: torch's allocated bytes on CUDA, else
    `fallback` (the weights file's size: fp32 on the device as on disk)."""
    index = _cuda_index(device)
    if index is None or runtime != "torch":
        return fallback
    try:
        return int(_torch().cuda.memory_allocated(index)) or fallback
    except (RuntimeError, AssertionError):
        return fallback


def release_device_memory(runtime: str, device: str, trimmer: HeapTrimmer | None) -> None:
    """Give back what dropped models and tensors left cached: Python's garbage first (the
    model's tensors are freed when their last reference goes), then torch's CUDA cache
    (`torch.cuda.empty_cache`) where torch ran on CUDA, then the C heap (`malloc_trim`),
    where glibc keeps freed blocks mapped. ONNX Runtime frees a session's arena with the
    session itself."""
    gc.collect()
    if _cuda_index(device) is not None and runtime == "torch":
        torch = _torch()
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
    if trimmer is not None:
        trimmer.trim()


def _torch() -> Any:
    import torch

    return torch
