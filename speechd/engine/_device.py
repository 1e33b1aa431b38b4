"""Which device the worker runs on: `auto`, `cpu`, `cuda` or `cuda:N`.

`parse_device` is torch-free (the CLI and the settings check `--device` with it, in the api
process too). `resolve_device` and `device_name` take the torch module the worker imported;
`warm_cuda` runs once after the model is on a CUDA device.

    parse_device(" CUDA:1 ")           # "cuda:1"
    resolve_device("auto", torch)      # "cuda:0" with a GPU, else "cpu"
    resolve_device("cuda:3", torch)    # ModelUnavailable: this machine has 1 CUDA device ...
"""

from __future__ import annotations

import logging
import platform
import re
import time
from typing import Annotated, Any, Final, Protocol

import msgspec

from speechd.errors import ModelUnavailable
from speechd.text import ChunkPolicy

__all__ = [
    "DEVICE_HELP",
    "CudaWarmUp",
    "Device",
    "Warmable",
    "device_name",
    "parse_device",
    "resolve_device",
    "warm_cuda",
    "warm_cuda_measured",
]

log = logging.getLogger("speechd.engine")

#: What `--device` takes, in words (CLI help and error messages).
DEVICE_HELP: Final = "auto, cpu, cuda or cuda:N"
#: The same as a pattern, for the Structs that carry a device (at most 3 digits: bounded).
_PATTERN: Final = r"^(auto|cpu|cuda(:[0-9]{1,3})?)$"
_DEVICE = re.compile(_PATTERN)

Device = Annotated[str, msgspec.Meta(pattern=_PATTERN)]
"""A device as the settings and `EngineConfig` hold it (already lower case)."""


def parse_device(value: str) -> str:
    """The canonical spelling of `value` (`auto`, `cpu`, `cuda`, `cuda:N`); ValueError, with
    a one-line message saying what is accepted, for anything else."""
    text = value.strip().lower() if isinstance(value, str) else ""
    if len(text) > 16 or not _DEVICE.match(text):
        raise ValueError(f"{value!r} is not a device: use {DEVICE_HELP} (N: a CUDA device index)")
    if text.startswith("cuda:"):
        return f"cuda:{int(text[5:])}"  # "cuda:01" is cuda:1
    return text


def resolve_device(wanted: str, torch: Any) -> str:
    """The device to load the model on, as torch names it (`cpu` or `cuda:N`), for the
    `--device` value `wanted`; ModelUnavailable with a one-line reason when it is not here.

    `cuda` is the current CUDA device (cuda:0 unless CUDA_VISIBLE_DEVICES says otherwise).
    A CUDA device is also made the current one, so that torch's seeding and any allocation
    that names no device land on it.
    """
    wanted = parse_device(wanted)
    if wanted == "cpu":
        return "cpu"
    available = bool(torch.cuda.is_available())
    if wanted == "auto" and not available:
        return "cpu"
    if not available:
        raise ModelUnavailable(
            f"--device {wanted} was asked for, but CUDA is not available here: "
            f"{_why_no_cuda(torch)}."
        )
    count = int(torch.cuda.device_count())
    index = int(wanted[5:]) if wanted.startswith("cuda:") else int(torch.cuda.current_device())
    if index >= count:
        known = "cuda:0" if count == 1 else f"cuda:0 to cuda:{count - 1}"
        raise ModelUnavailable(
            f"--device {wanted} was asked for, but this machine has {count} CUDA "
            f"device{'s' if count != 1 else ''} ({known})."
        )
    torch.cuda.set_device(index)
    return f"cuda:{index}"


def _why_no_cuda(torch: Any) -> str:
    built = getattr(getattr(torch, "version", None), "cuda", None)
    version = getattr(torch, "__version__", "?")
    if not built:
        return (
            f"this torch ({version}) was built without CUDA; install a CUDA build "
            "(on a Jetson, NVIDIA's wheel for its JetPack)"
        )
    return f"torch {version} (CUDA {built}) sees no CUDA device (driver, CUDA_VISIBLE_DEVICES?)"


def device_name(device: str, torch: Any) -> str:
    """A readable name of `device`: the GPU's (`NVIDIA H100 80GB HBM3`, `Orin`) or the CPU's
    model; "" when it cannot be told."""
    try:
        if device.startswith("cuda"):
            return str(torch.cuda.get_device_name(torch.device(device).index or 0))
    except (AttributeError, RuntimeError, AssertionError, ValueError):  # no torch, no GPU
        return ""
    return _cpu_name()


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                # x86 says "model name"; some aarch64 kernels say "Model" (the board) only.
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model") and value.strip():
                    return value.strip()[:120]
    except OSError:
        pass
    return (platform.processor() or platform.machine())[:120]


#: Long enough that the planner's later chunks reach its token cap (`max_tokens`).
_WARM_TEXT = " ".join(
    [
        "The warm up on a graphics card runs the longest chunk the planner makes, once,",
        "so that the kernels for long inputs are loaded and the memory they need is reserved",
        "before the first listener arrives. A short chunk follows it, because a short one",
        "picks other kernels than a long one does, and both kinds will be asked for soon.",
    ]
    * 3
)


class Warmable(Protocol):
    """What the warm-up uses of an `Engine`. Typed by its shape, not by `Engine` itself: the
    engine is built on this module (its config and runtimes name devices here), so importing
    it back would draw a circle."""

    @property
    def runtime(self) -> str: ...

    @property
    def device(self) -> str: ...

    @property
    def voices(self) -> Any: ...

    def plan(self, text: str, voice: str, policy: ChunkPolicy | None = None) -> list[Any]: ...

    def synthesize(
        self, chunk: Any, voice: str, speed: float = 1.0, *, seed: int | None = None
    ) -> Any: ...


def warm_cuda(engine: Warmable) -> float:
    """On a CUDA engine: synthesize the longest chunk the default plan makes and a short one,
    and wait for the device; returns the seconds it took. CUDA loads kernels lazily and its
    caching allocator grows on demand, so without this the first long chunk of the first cast
    pays for both (the worker's own warm-up measures chunks of at most a few seconds).

    The same path serves both runtimes, through `Engine.synthesize`: on ONNX Runtime it runs
    the sessions (the CUDA provider's arena grows, and TensorRT, where the session has it,
    builds or loads its engines), and each run has returned its audio to the host, so there
    is nothing left to wait for; on torch the device is synchronised, and the long chunk's
    peak memory over what was allocated before it is what one second of audio needs on this
    device (`CudaWarmUp.activation_bytes_per_s`, for the memory budget)."""
    return warm_cuda_measured(engine).seconds


class CudaWarmUp(msgspec.Struct, frozen=True):
    seconds: float
    activation_bytes_per_s: int | None = None
    """torch on CUDA only: the long chunk's peak allocation over its audio seconds."""


def warm_cuda_measured(engine: Warmable) -> CudaWarmUp:
    """`warm_cuda`, with what it measured."""
    started = time.perf_counter()
    voice = engine.voices.default_voice
    chunks = engine.plan(_WARM_TEXT, voice, ChunkPolicy().with_rtf(0.0))
    longest = sorted(chunks, key=lambda c: -c.tokens)[:1]
    torch = _torch_if(engine)
    per_s: int | None = None
    for n, chunk in enumerate(longest + chunks[:1]):
        if torch is not None and n == 0:
            torch.cuda.synchronize(engine.device)
            torch.cuda.reset_peak_memory_stats(engine.device)
            before = int(torch.cuda.memory_allocated(engine.device))
        made = engine.synthesize(chunk, voice, 1.0, seed=0)
        if torch is not None and n == 0 and made.duration_s > 0:
            torch.cuda.synchronize(engine.device)
            peak = int(torch.cuda.max_memory_allocated(engine.device)) - before
            per_s = max(1, round(peak / made.duration_s))
    if torch is not None:
        torch.cuda.synchronize(engine.device)
    seconds = time.perf_counter() - started
    log.info("CUDA warm-up on %s (%s): %.2f s", engine.device, engine.runtime, seconds)
    return CudaWarmUp(seconds, per_s)


def _torch_if(engine: Warmable) -> Any:
    """torch, where the engine runs it on CUDA; None otherwise (ONNX Runtime's worker never
    imports it)."""
    if engine.runtime != "torch" or not engine.device.startswith("cuda"):
        return None
    import torch

    return torch
