"""Loading an engine: the model folder, the runtime `EngineConfig.engine` picks, the G2P of
the default voice and, on an accelerator, the sanity check and a warm-up (`warm_cuda`, through
whichever runtime); then the device memory budget chunks are planned within.

"auto" takes ONNX Runtime when it is installed (with a CUDA provider, where there is an
NVIDIA GPU) and the model can be exported or found, and torch otherwise, logging why; an ONNX
path that fails falls back to torch. The torch runtime imports torch and kokoro; the ONNX one
imports neither (its export, when one must be made, runs in a child process).

The engine speaks through a `ResidentRuntime`, which can give the model back and take it
again (`Engine.unload`, `Engine.load`), and moves to the CPU when a device stays full or fails
the sanity check under `--device auto` (with a device named, the load fails instead, saying
why). A wake opens the same runtime on the same device the first load chose.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
import numpy as np
import numpy.typing as npt

from speechd.errors import CastFailed, InvalidRequest, ModelUnavailable

from ._config import EngineConfig
from ._device import warm_cuda_measured
from ._engine import Engine
from ._files import ModelFolder, fetch_model_folder, open_model_folder
from ._memory import MemoryBudget, cap_torch, weights_on_device
from ._resident import ResidentRuntime, RuntimeOpener
from ._runtime import Inference, Request, Runtime
from ._sanity import SANITY_SENTENCE, SANITY_SHORT, SanityReport, compare
from ._voices import VoiceBook

if TYPE_CHECKING:
    from ._onnx import OnnxRuntime

__all__ = ["load_engine", "sanity_check"]

log = logging.getLogger("speechd.engine")

#: Where a chunk retried in pieces may be cut: after a space or a punctuation mark.
_BOUNDARIES = " ,.;:!?\u2014\u2026"


def _read_vocab(folder: ModelFolder) -> dict[str, int]:
    try:
        vocab = json.loads(folder.config.read_text(encoding="utf-8"))["vocab"]
        if not isinstance(vocab, dict) or not all(
            isinstance(k, str) and isinstance(v, int) for k, v in vocab.items()
        ):
            raise TypeError("vocab is not a map of phonemes to ids")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelUnavailable(
            f"Cannot read the vocabulary of {str(folder.config)!r}: {exc}"
        ) from exc
    return vocab


def load_engine(config: EngineConfig, *, open_runtime: RuntimeOpener | None = None) -> Engine:
    """Load Kokoro-82M as `config` says; ModelUnavailable when it cannot (within seconds,
    except for the one-off ONNX export of new weights).

    `open_runtime(device)` opens the runtime on a device; by default as `config` says. Tests
    pass one that stands for a device this machine lacks (a CUDA device that runs out of
    memory, or times speech wrongly)."""
    started = time.perf_counter()
    folder = open_model_folder(config.model_dir) if config.model_dir else fetch_model_folder()
    voices = VoiceBook(
        folder.voices, voice_map=config.voice_map, default_voice=config.default_voice
    )
    if config.default_voice not in folder.voices:
        raise ModelUnavailable(
            f"The default voice {config.default_voice!r} is not in {str(folder.root)!r}; "
            f"installed: {', '.join(folder.voices)}."
        )
    vocab = _read_vocab(folder)
    opener = open_runtime or _opener(config, folder)
    resident = ResidentRuntime(
        opener,
        opener(config.device),
        wanted=config.device,
        boundaries=[vocab[c] for c in _BOUNDARIES if c in vocab],
    )
    engine = Engine(resident, folder, voices, vocab)
    try:
        engine.use_lexicon(config.lexicon)
    except (OSError, ValueError) as exc:
        raise ModelUnavailable(f"The lexicon cannot be read: {exc}") from exc
    try:  # the default voice's G2P now, so the first request does not wait for spaCy
        engine._g2p_for(voices.language(config.default_voice))
    except InvalidRequest as exc:
        raise ModelUnavailable(
            f"The default voice {config.default_voice!r} cannot be used: {exc.message}"
        ) from exc
    if engine.device != "cpu":
        _check_device(engine, resident, opener, config.device)
    _plan_memory(engine, resident, config, folder)
    engine.load_s = time.perf_counter() - started
    log.info(
        "Kokoro-82M loaded from %s in %.1f s (%d voices): %s",
        folder.root,
        engine.load_s,
        len(folder.voices),
        engine.detail,
    )
    return engine


def _opener(config: EngineConfig, folder: ModelFolder) -> RuntimeOpener:
    """Opens the runtime `config` asks for on a device; after the first, always the same
    runtime and decoder graph (`auto` decides once), held to the memory budget on a CUDA
    device."""
    kind = config.engine
    graph = config.graph

    def open_runtime(device: str) -> Runtime:
        nonlocal kind, graph
        settings = msgspec.structs.replace(config, device=device, engine=kind, graph=graph)
        runtime = _load_runtime(settings, folder)
        kind = runtime.name  # type: ignore[assignment]
        # Later opens (a wake, a move to the CPU) take the graph the first one spoke with,
        # unmeasured: the engine's fingerprint, taken once, names it.
        graph = getattr(runtime, "graph", "float") or "float"
        if config.max_device_memory and runtime.name == "torch":
            cap_torch(runtime.device, config.max_device_memory)
        return runtime

    return open_runtime


def sanity_check(engine: Engine, device: Runtime, cpu: Runtime) -> SanityReport:
    """`device` against `cpu` for the engine's default voice (`_sanity` says how)."""
    started = time.perf_counter()
    voice = engine.voices.default_voice
    runs: list[tuple[Inference, Inference]] = []
    for runtime in (device, cpu):
        made = []
        for text in (SANITY_SENTENCE, SANITY_SHORT):
            tokens, style = _inputs(engine, text, voice)
            made.append(runtime.infer(tokens, style, 1.0, 0))
        runs.append((made[0], made[1]))
    report = compare(device.device, runs[0], runs[1])
    return dataclasses.replace(report, seconds=time.perf_counter() - started)


def _inputs(engine: Engine, text: str, voice: str) -> tuple[list[int], npt.NDArray[np.float32]]:
    """`text`'s tokens as one input (every chunk the planner cuts, joined by a space) and
    the style `voice` reads that many with, as `Engine.synthesize` builds them."""
    phonemes = " ".join(chunk.phonemes for chunk in engine.plan(text, voice))
    vocab = engine._vocab
    tokens = [vocab[p] for p in phonemes if p in vocab][:500]
    return tokens, engine._packs.style(voice, len(tokens))


def _check_device(
    engine: Engine, resident: ResidentRuntime, opener: RuntimeOpener, wanted: str
) -> None:
    """The sanity check (`_sanity`) of the accelerator the engine loaded on: a device that
    fails it is refused (ModelUnavailable), or left for the CPU under `auto`."""
    device = engine.device
    cpu = opener("cpu")
    try:
        report = sanity_check(engine, resident.current, cpu)
    except CastFailed as exc:
        problem: str | None = f"{device} failed the sanity check's synthesis: {exc.message}"
    else:
        engine.sanity = report
        log.info("sanity check of %s against the CPU: %s", device, report.describe())
        problem = report.problem
    if problem is None:
        return
    if wanted != "auto":
        raise ModelUnavailable(f"{problem} (--device cpu or auto speaks on the CPU instead).")
    resident.fall_back(problem, cpu)


def _plan_memory(
    engine: Engine, resident: ResidentRuntime, config: EngineConfig, folder: ModelFolder
) -> None:
    """The device memory budget (`--max-device-memory`), and on a CUDA device the warm-up,
    which measures what a second of audio takes there. A device the budget leaves no room on
    is refused (ModelUnavailable), or left for the CPU under `auto`."""
    file_size = folder.weights.stat().st_size

    def plan(per_audio_s: int | None = None) -> MemoryBudget:
        weights = weights_on_device(engine.runtime, engine.device, file_size)
        return MemoryBudget.plan(
            config.max_device_memory,
            weights=weights,
            runtime=engine.runtime,
            device=engine.device,
            per_audio_s=per_audio_s,
        )

    try:
        engine.memory = plan()
        if engine.device.startswith("cuda"):
            warmed = warm_cuda_measured(engine)
            if warmed.activation_bytes_per_s:
                engine.memory = plan(warmed.activation_bytes_per_s)
    except ModelUnavailable as exc:
        if config.device != "auto" or engine.device == "cpu":
            raise
        resident.fall_back(exc.message)
        engine.memory = plan()
    if engine.memory.limit is not None:
        log.info(
            "memory budget on %s: %.0f MiB, chunks of at most %.1f s of audio",
            engine.device,
            engine.memory.limit / (1 << 20),
            engine.memory.chunk_s,
        )


def _load_runtime(config: EngineConfig, folder: ModelFolder) -> Runtime:
    from ._torch import load_torch_runtime

    if config.engine == "torch":
        return load_torch_runtime(folder, config.device, config.threads, config.graph)
    if config.engine == "onnx":
        return _load_onnx(config, folder)
    reason = _onnx_unsuitable(config)
    if reason is None:
        try:
            return _load_onnx(config, folder)
        except ModelUnavailable as exc:
            reason = exc.message
            log.warning("engine auto: ONNX Runtime cannot be used (%s); using torch", reason)
    else:
        log.info("engine auto: %s; using torch", reason)
    try:
        return load_torch_runtime(folder, config.device, config.threads, config.graph)
    except ModelUnavailable as exc:
        raise ModelUnavailable(f"{exc.message} (ONNX Runtime: {reason})") from exc


def _onnx_unsuitable(config: EngineConfig) -> str | None:
    """Why `auto` should not try ONNX Runtime here, or None."""
    from ._onnx import onnx_available

    if not onnx_available():
        return "ONNX Runtime is not installed"
    if config.device != "cpu":
        import onnxruntime

        if "CUDAExecutionProvider" not in onnxruntime.get_available_providers() and (
            config.device.startswith("cuda") or _gpu_present()
        ):
            return "this ONNX Runtime has no CUDA provider (pip install onnxruntime-gpu)"
    return None


def _gpu_present() -> bool:
    """An NVIDIA GPU on this machine, asked of the driver rather than of torch (which would
    cost an ONNX worker the memory it avoids torch for): the Linux driver's GPUs, a Jetson,
    or WSL2's CUDA library (WSL has no /proc/driver/nvidia; its GPU comes from Windows)."""
    driver = Path("/proc/driver/nvidia/gpus")
    return (
        (driver.is_dir() and any(driver.iterdir()))
        or Path("/etc/nv_tegra_release").exists()
        or any(Path("/usr/lib/wsl/lib").glob("libcuda.so*"))
    )


def _load_onnx(config: EngineConfig, folder: ModelFolder) -> Runtime:
    from ._export import default_cache_dir, ensure_export
    from ._onnx import check_device, load_onnx_runtime

    check_device(config.device)
    cache = Path(config.cache_dir).expanduser() if config.cache_dir else default_cache_dir()
    if config.onnx_model:
        export = Path(config.onnx_model).expanduser()
        if not export.exists():
            raise ModelUnavailable(f"The ONNX model {str(export)!r} does not exist.")
    else:
        if not all(importlib.util.find_spec(m) for m in ("torch", "kokoro")):
            from ._export import find_export

            found = find_export(folder, cache)
            if found is None:
                raise ModelUnavailable(
                    "The ONNX export of these weights is not made yet, and making it needs "
                    "torch and kokoro installed (or set --onnx-model to an existing export)."
                )
            export = found
        else:
            started = time.perf_counter()
            export = ensure_export(folder, cache)
            log.info("ONNX export %s ready in %.1f s", export, time.perf_counter() - started)
    runtime = load_onnx_runtime(
        export,
        config.device,
        config.threads,
        trt_cache=cache / "tensorrt",
        gpu_mem_limit=config.max_device_memory,
    )
    if runtime.device == "cpu" and export.is_dir() and config.graph != "float":
        _choose_graph(runtime, export, folder, config, cache)
    return runtime


def _choose_graph(
    runtime: OnnxRuntime, export: Path, folder: ModelFolder, config: EngineConfig, cache: Path
) -> None:
    """Put a CPU runtime on the decoder graph `config.graph` names (`_graph_choice`), its
    variants built first if need be (`_variants`)."""
    from ._batch import PROBE_PHONEMES
    from ._graph_choice import pick_graph
    from ._packs import read_pack
    from ._variants import ensure_variants

    variants = ensure_variants(export, folder.root, cache)
    vocab = _read_vocab(folder)
    tokens = [vocab[p] for p in PROBE_PHONEMES if p in vocab]
    pack = read_pack(folder.voice_path(config.default_voice))
    style = np.ascontiguousarray(pack[min(len(tokens), len(pack)) - 1].reshape(1, -1))
    # The choice is kept beside the variants (none made: nothing to choose, nor keep).
    store = next((v.path.parent for v in variants.values() if v.name != "float"), None)
    pick_graph(
        runtime,
        variants,
        config.graph,
        Request(tokens, style, 1.0, 0),
        threads=config.threads,
        store=store,
    )
