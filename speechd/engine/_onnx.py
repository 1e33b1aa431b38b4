"""The ONNX Runtime runtime: speechd's two-graph export of the weights (`_export`), or a
Kokoro ONNX export the user already has.

Nothing here imports torch or kokoro: the worker of an ONNX engine loads onnxruntime, numpy
and the G2P only.

Devices and providers: `cpu` runs on the CPU provider. `cuda` / `cuda:N` needs
onnxruntime-gpu: the CUDA provider on device N, preceded by TensorRT's where that build has it
(Jetson's does), and the CPU provider last for the few nodes neither takes. `auto` tries that
chain and takes what the session reports it got. Kokoro's inputs change shape with every chunk,
so the GPU settings are the ones for dynamic shapes: cuDNN picks convolution algorithms by
heuristic (an exhaustive search would run again for every new length), and TensorRT builds one
engine for a fixed range of shapes (explicit profiles, cached next to the export) instead of a
new one whenever a chunk is longer than any before. A chunk longer than TensorRT's profile
(`TRT_MAX_FRAMES`: 40 s of audio) is decoded on the CUDA provider alone. The batched graphs
(`_export`, several chunks in one pass) run on CUDA without TensorRT: a profile for every
batch size and length would build engines for shapes that may never come. Neither path has
been run on a GPU here (the machines this was written on have none).

A foreign export is one graph: tokens (`tokens` or `input_ids`), `style` and `speed` in;
audio, and durations when the export has them as a second output (kokoro's KModelForONNX
does; the kokoro-onnx files do not), out. Its decoder noise is its own: seeds do nothing.
It runs one chunk at a time (`max_batch` 1), as does a speechd export made before batching
(no batched graphs in it).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from speechd.errors import CastFailed, ModelUnavailable

from ._export import BACK, BACK_BATCH, FRONT, FRONT_BATCH, MANIFEST
from ._onnx_graphs import SplitGraphs, WholeGraph
from ._runtime import (
    MAX_BATCH,
    SAMPLES_PER_FRAME,
    Inference,
    Request,
    infer_batch_in_two_stages,
    infer_in_two_stages,
)
from ._stop import Preempted, Stop
from ._variants import Variant

__all__ = ["OnnxRuntime", "check_device", "load_onnx_runtime", "onnx_available"]

log = logging.getLogger("speechd.engine")

CPU: Final = "CPUExecutionProvider"
CUDA: Final = "CUDAExecutionProvider"
TENSORRT: Final = "TensorrtExecutionProvider"
#: The longest input TensorRT's engines are built for (Kokoro's 512-token context).
TRT_MAX_TOKENS: Final = 512
#: ... and the most frames (25 ms each) of one chunk's audio: 40 s.
TRT_MAX_FRAMES: Final = 1600


def onnx_available() -> bool:
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def _errors() -> tuple[type[BaseException], ...]:
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    names = ("Fail", "InvalidArgument", "RuntimeException", "EPFail", "NotImplemented")
    found = tuple(getattr(state, n) for n in names if isinstance(getattr(state, n, None), type))
    return (*found, RuntimeError, ValueError)


class OnnxRuntime:
    name = "onnx"

    def __init__(
        self, graphs: SplitGraphs | WholeGraph, device: str, detail: str, fingerprint: str = "onnx"
    ) -> None:
        self._graphs = graphs
        self.device = device
        self.detail = detail
        self._detail = detail
        self.fingerprint = fingerprint
        self.graph = "float"
        """The decoder graph it speaks with: "float" (the export's), or a variant of it
        (`_variants`: "fused", "int8"), put in place by `use_graph`."""
        self._errors = _errors()

    def use_graph(self, variant: Variant) -> None:
        """Decode with `variant` from now on (speechd's export, on the CPU). Its audio is
        not the float graph's bit for bit, so the fingerprint names it ("onnx" stays the
        float graph's, as before variants existed). ModelUnavailable where the graph cannot
        be swapped or opened."""
        graphs = self._graphs
        if not isinstance(graphs, SplitGraphs) or not graphs.swappable:
            raise ModelUnavailable("Graph variants run on speechd's export on a CPU only.")
        try:
            graphs.use_back(variant.path)
        except (*self._errors, OSError) as exc:
            raise ModelUnavailable(f"Cannot open the {variant.name} graph: {exc}") from exc
        self.graph = variant.name
        float_graph = variant.name == "float"
        self.fingerprint = "onnx" if float_graph else f"onnx:{variant.name}:{variant.id}"
        self.detail = self._detail if float_graph else f"{self._detail}, {variant.name} graph"

    @property
    def seeded(self) -> bool:
        """Whether a seed decides the decoder's noise (speechd's export; not a foreign one)."""
        return isinstance(self._graphs, SplitGraphs)

    @property
    def max_batch(self) -> int:
        """MAX_BATCH with speechd's batched graphs; 1 without (a foreign or older export),
        and on the int8 graph (the batched graphs are float: an item would not sound as it
        does alone)."""
        graphs = self._graphs
        batches = isinstance(graphs, SplitGraphs) and graphs.batches and self.graph != "int8"
        return MAX_BATCH if batches else 1

    def prepare_batch(self, max_items: int) -> None:
        """Open the batched sessions now (max_items > 1) or let them go (1)."""
        if isinstance(self._graphs, SplitGraphs):
            try:
                self._graphs.prepare_batch(max_items)
            except self._errors as exc:
                raise CastFailed(f"Cannot open the batched graphs on {self.device}: {exc}") from exc

    def infer_batch(self, requests: Sequence[Request]) -> list[Inference]:
        if not isinstance(self._graphs, SplitGraphs) or not self._graphs.batches:
            raise CastFailed("This ONNX export has no batched graphs: one chunk at a time.")
        try:
            return infer_batch_in_two_stages(self._graphs, requests)
        except self._errors as exc:
            raise CastFailed(f"Batched synthesis failed on {self.device}: {exc}") from exc

    def infer(
        self, tokens: Sequence[int], style: npt.NDArray[np.float32], speed: float, seed: int | None
    ) -> Inference:
        try:
            if isinstance(self._graphs, SplitGraphs):
                return infer_in_two_stages(self._graphs, tokens, style, speed, seed)
            return self._graphs.infer(tokens, style, speed)
        except self._errors as exc:
            raise CastFailed(f"Synthesis failed on {self.device}: {exc}") from exc

    @contextmanager
    def stoppable(self, stop: Stop) -> Iterator[None]:
        """`stop` sets the sessions' `RunOptions.terminate`: the run in flight ends between
        kernels with an error, raised as Preempted; the flag is cleared before the next."""
        run = self._graphs.run_options
        if run is None:  # no RunOptions to end a run with: it runs to its end
            stop.check()
            yield
            return

        def terminate() -> None:
            run.terminate = True

        try:
            with stop.watching(terminate):
                yield
        except CastFailed:
            if stop.is_set():
                raise Preempted from None
            raise
        finally:
            run.terminate = False


def _session_options(ort: Any, threads: int | None) -> Any:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or 0  # 0: ONNX Runtime's default (physical cores)
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    # Memory patterns are planned per input shape, and every chunk has a new one: they would
    # only pile up (measured: peak RSS 1.36 GB with them, 1.0 GB without, 510-token chunks).
    options.enable_mem_pattern = False
    options.log_severity_level = 3  # errors only: shape-inference notes are not ours to fix
    return options


def _cpu_run_options(ort: Any) -> Any:
    """Give the CPU arena's unused blocks back after every run: a 27 s chunk's activations
    take ~500 MB that would otherwise stay held until a longer chunk reused them (measured on
    the real weights: RSS 1008 MiB after such a chunk, 478 MiB with this; peak 967 MiB
    either way)."""
    options = ort.RunOptions()
    options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return options


def _gpu_chain(
    available: Sequence[str],
    index: int,
    trt: dict[str, str] | None,
    mem_limit: int | None = None,
) -> list[Any]:
    chain: list[Any] = []
    if trt is not None and TENSORRT in available:
        chain.append((TENSORRT, {"device_id": str(index), **trt}))
    cuda = {
        "device_id": str(index),
        "cudnn_conv_algo_search": "HEURISTIC",
        "arena_extend_strategy": "kSameAsRequested",
    }
    if mem_limit:  # the CUDA arena's cap (--max-device-memory), in bytes
        cuda["gpu_mem_limit"] = str(mem_limit)
    chain.append((CUDA, cuda))
    chain.append(CPU)
    return chain


def _trt_options(cache: Path, shapes: dict[str, tuple[str, str, str]]) -> dict[str, str]:
    cache.mkdir(parents=True, exist_ok=True)
    return {
        "trt_engine_cache_enable": "True",
        "trt_engine_cache_path": str(cache),
        "trt_timing_cache_enable": "True",
        "trt_timing_cache_path": str(cache),
        "trt_profile_min_shapes": ",".join(f"{n}:{s[0]}" for n, s in shapes.items()),
        "trt_profile_opt_shapes": ",".join(f"{n}:{s[1]}" for n, s in shapes.items()),
        "trt_profile_max_shapes": ",".join(f"{n}:{s[2]}" for n, s in shapes.items()),
    }


def _profiles(channels: dict[str, int]) -> tuple[dict[str, Any], dict[str, Any]]:
    """TensorRT's shape ranges (min, opt, max) for every dynamic input of the two graphs."""
    t_lo, t_opt, t_hi = 3, 128, TRT_MAX_TOKENS
    f_lo, f_opt, f_hi = t_lo, 400, TRT_MAX_FRAMES
    s = SAMPLES_PER_FRAME
    d, t = channels["d"], channels["t_en"]
    front = {"input_ids": (f"1x{t_lo}", f"1x{t_opt}", f"1x{t_hi}")}
    back = {
        "d": (f"1x{t_lo}x{d}", f"1x{t_opt}x{d}", f"1x{t_hi}x{d}"),
        "t_en": (f"1x{t}x{t_lo}", f"1x{t}x{t_opt}", f"1x{t}x{t_hi}"),
        "frames": (f"{f_lo}", f"{f_opt}", f"{f_hi}"),
        "noise": (f"1x{f_lo * s}x1", f"1x{f_opt * s}x1", f"1x{f_hi * s}x1"),
    }
    return front, back


def check_device(device: str) -> None:
    """ModelUnavailable now, before any export, when ONNX Runtime cannot serve `device`."""
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise ModelUnavailable(
            f"The ONNX engine needs ONNX Runtime (pip install 'speechd[onnx]'): {exc}"
        ) from exc
    if device.startswith("cuda") and CUDA not in ort.get_available_providers():
        raise ModelUnavailable(
            f"device {device!r} was asked for, but this ONNX Runtime has no CUDA provider "
            "(pip install onnxruntime-gpu, or --engine torch)."
        )


def load_onnx_runtime(
    export: Path,
    device: str,
    threads: int | None,
    *,
    trt_cache: Path,
    gpu_mem_limit: int | None = None,
) -> OnnxRuntime:
    """Sessions over `export` (speechd's export folder, or a foreign `.onnx` file) on `device`
    ("auto", "cpu", "cuda", "cuda:N"; only "auto" may end up on the CPU). TensorRT keeps its
    engines in `trt_cache`; `gpu_mem_limit` caps each session's CUDA arena (bytes)."""
    check_device(device)
    import onnxruntime as ort

    available = list(ort.get_available_providers())
    wants_gpu = device != "cpu" and CUDA in available
    index = int(device.partition(":")[2] or 0) if device.startswith("cuda") else 0
    options = _session_options(ort, threads)

    def open_on(gpu: bool) -> tuple[SplitGraphs | WholeGraph, list[str]]:
        if export.is_dir():
            return _open_split(
                ort, export, options, available, gpu, index, trt_cache, gpu_mem_limit
            )
        chain = _gpu_chain(available, index, None, gpu_mem_limit) if gpu else [CPU]
        session = ort.InferenceSession(str(export), options, providers=chain)
        run = ort.RunOptions() if gpu else _cpu_run_options(ort)
        return WholeGraph(session, export, run), list(session.get_providers())

    try:
        try:
            graphs, providers = open_on(wants_gpu)
        except _errors():
            if not (wants_gpu and device == "auto"):
                raise
            graphs, providers = open_on(False)  # onnxruntime-gpu on a machine without a GPU
        on_gpu = CUDA in providers or TENSORRT in providers
        if wants_gpu and not on_gpu and device == "auto":
            graphs, providers = open_on(False)  # the CPU settings, not the GPU ones
            log.info(
                "device auto: this ONNX Runtime has a CUDA provider, but it did not start "
                "(no GPU or driver here?); speaking on the CPU"
            )
    except ModelUnavailable:
        raise
    except (*_errors(), OSError) as exc:
        raise ModelUnavailable(f"Cannot load the ONNX model {str(export)!r}: {exc}") from exc
    on_gpu = CUDA in providers or TENSORRT in providers
    if device.startswith("cuda") and not on_gpu:
        raise ModelUnavailable(
            f"device {device!r} was asked for, but ONNX Runtime could not start its CUDA "
            f"provider (providers: {', '.join(providers)})."
        )
    used = f"cuda:{index}" if on_gpu else "cpu"  # as the torch runtime names it
    threads_said = f", {threads} threads" if threads else ""
    detail = f"onnxruntime {ort.__version__} on {', '.join(providers)}{threads_said}"
    fingerprint = "onnx"
    if isinstance(graphs, WholeGraph):
        detail += f" ({export.name}: its own noise, seeds ignored)"
        # Its weights are its own, not the model folder's: the file names them.
        fingerprint = f"onnx:{export.name}:{export.stat().st_size}"
    return OnnxRuntime(graphs, used, detail, fingerprint)


def _open_split(
    ort: Any,
    export: Path,
    options: Any,
    available: list[str],
    gpu: bool,
    index: int,
    trt_cache: Path,
    mem_limit: int | None = None,
) -> tuple[SplitGraphs, list[str]]:
    manifest = json.loads((export / MANIFEST).read_text(encoding="utf-8"))
    if not gpu:
        front = ort.InferenceSession(str(export / FRONT), options, providers=[CPU])
        back = ort.InferenceSession(str(export / BACK), options, providers=[CPU])
        pair = _batched(ort, export, manifest, options, [CPU])

        def open_back(path: Path) -> Any:
            return ort.InferenceSession(str(path), options, providers=[CPU])

        run = _cpu_run_options(ort)
        return SplitGraphs(front, back, run=run, batched=pair, open_back=open_back), [CPU]
    trt_front = trt_back = None
    if TENSORRT in available:
        front_shapes, back_shapes = _profiles(manifest["channels"])
        trt_front = _trt_options(trt_cache, front_shapes)
        trt_back = _trt_options(trt_cache, back_shapes)
    front = ort.InferenceSession(
        str(export / FRONT), options, providers=_gpu_chain(available, index, trt_front, mem_limit)
    )
    back = ort.InferenceSession(
        str(export / BACK), options, providers=_gpu_chain(available, index, trt_back, mem_limit)
    )
    providers = list(back.get_providers())
    long_back = None
    if TENSORRT in providers:
        long_back = ort.InferenceSession(
            str(export / BACK), options, providers=_gpu_chain(available, index, None, mem_limit)
        )
    cuda = _gpu_chain(available, index, None, mem_limit)
    pair = _batched(ort, export, manifest, options, cuda)
    log.info("ONNX export %s on %s", export, ", ".join(providers))
    long = None if long_back is None else (long_back, TRT_MAX_FRAMES)
    return SplitGraphs(front, back, long, ort.RunOptions(), batched=pair), providers


def _batched(
    ort: Any, export: Path, manifest: dict[str, Any], options: Any, providers: list[Any]
) -> Callable[[], tuple[Any, Any]] | None:
    """What opens sessions over the export's batched graphs; None when it has none. Only an
    export whose manifest says it made them counts (EXPORT_FORMAT 2 on), never an older file
    by that name."""
    names = (FRONT_BATCH, BACK_BATCH)
    if not manifest.get("batch") or not all((export / n).is_file() for n in names):
        return None

    def open_sessions() -> tuple[Any, Any]:
        session = ort.InferenceSession
        front = session(str(export / FRONT_BATCH), options, providers=providers)
        return front, session(str(export / BACK_BATCH), options, providers=providers)

    return open_sessions
