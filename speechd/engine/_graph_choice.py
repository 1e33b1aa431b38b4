"""Which decoder graph an ONNX Runtime worker on a CPU speaks with (`EngineConfig.graph`):
"float" (the export's own), "fused" (float, rewritten) or "int8" (`_variants`), or "auto":
the one measured fastest on this machine among those within their quality bounds, as
`--max-batch auto` is chosen.

`auto` times each graph on the same probe chunk (`PROBE_PHONEMES`, ~2.6 s of speech, the
default voice; one untimed run, then the fastest of `PROBE_RUNS`; the float graph measured
first and again last, its faster figure counting), checks its durations are the float
graph's and its audio within its bound of the float graph's (`FUSED_BOUND`, `INT8_BOUND`:
a kernel that computes wrongly on this CPU is caught here, not by a listener), and keeps a
variant only when it is at least `MIN_GAIN` faster than the more exact graph it would
replace. On a CPU without 8-bit dot products int8 measures slower, and float or fused is
kept.

The choice is kept beside the variants (`choice.json`), by machine: the CPU's model and
the instructions that decide it, the thread count and ONNX Runtime's version. A restart on
the same machine takes the same graph without measuring again, so it keeps the same
fingerprint and a new attempt goes on with the chunks its cast already has (a graph measured
anew might come out otherwise on a busy machine, and a cast would start over). Delete the
file, or name a graph, to choose again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import platform
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, NamedTuple, Protocol

import numpy as np

from speechd.errors import CastFailed, ModelUnavailable

from ._quality import log_spectral_distance
from ._runtime import Inference, Request
from ._variants import FUSED_BOUND, GRAPHS, INT8_BOUND, Variant

__all__ = ["MIN_GAIN", "Measured", "choose_graph", "machine_key", "measure_graphs", "pick_graph"]

log = logging.getLogger("speechd.engine")

#: A variant is kept only when at least this much faster than the graph it would replace.
MIN_GAIN: Final = 0.05
PROBE_RUNS: Final = 3
BOUNDS: Final = {"float": 0.0, "fused": FUSED_BOUND, "int8": INT8_BOUND}
CHOICE_FILE: Final = "choice.json"
#: CPU features that decide which graph is fastest (8-bit and bf16 dot products).
_FEATURES: Final = ("avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8", "asimddp", "i8mm")


class Measured(NamedTuple):
    """One graph on the probe: the fastest run (s), its distance from the float graph's audio
    (dB) and whether its durations were the float graph's."""

    cost_s: float
    distance_db: float
    same_durations: bool


class GraphRuntime(Protocol):
    """What choosing needs of a runtime (`OnnxRuntime`)."""

    def use_graph(self, variant: Variant) -> None: ...

    def infer(self, tokens: Any, style: Any, speed: float, seed: int | None) -> Inference: ...


def measure_graphs(
    runtime: GraphRuntime,
    variants: Mapping[str, Variant],
    request: Request,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Measured]:
    """Each graph of `variants` on `request`, in `GRAPHS` order, the float graph again last
    (see the module); the runtime is left on the float graph. A variant that cannot be
    opened or run here is left out (logged): it is not chosen. The float graph failing is
    the model failing: its error is raised."""
    reference: Inference | None = None
    measured: dict[str, Measured] = {}
    for name in [*(g for g in GRAPHS if g in variants), "float"]:
        try:
            runs, out = _timed(runtime, variants[name], request, clock)
        except (ModelUnavailable, CastFailed) as exc:
            if name == "float":
                raise
            log.warning("the %s graph cannot run here (%s): not chosen", name, exc.message)
            continue
        if reference is None:
            reference = out
        same = out.durations is not None and np.array_equal(out.durations, reference.durations)
        distance = log_spectral_distance(out.audio, reference.audio) if same else float("inf")
        cost = min(runs)
        if name in measured:  # the float graph again: its faster figure counts
            cost = min(cost, measured[name].cost_s)
        measured[name] = Measured(cost, distance, same)
    return measured


def _timed(
    runtime: GraphRuntime, variant: Variant, request: Request, clock: Callable[[], float]
) -> tuple[list[float], Inference]:
    runtime.use_graph(variant)
    out = runtime.infer(*request)  # untimed: the session's first run
    runs: list[float] = []
    for _ in range(PROBE_RUNS):
        began = clock()
        out = runtime.infer(*request)
        runs.append(clock() - began)
    return runs, out


def choose_graph(measured: Mapping[str, Measured]) -> str:
    """The graph to speak with: from the float graph on, each more approximate one that
    kept its durations and its bound, when `MIN_GAIN` faster than the choice so far."""
    chosen = "float"
    for name in GRAPHS[1:]:
        m = measured.get(name)
        if m is None or not m.same_durations or m.distance_db > BOUNDS[name]:
            continue
        if m.cost_s <= measured[chosen].cost_s * (1 - MIN_GAIN):
            chosen = name
    return chosen


def machine_key(threads: int | None) -> str:
    """What decides which graph is fastest here: the CPU, its dot-product instructions, the
    threads, ONNX Runtime's version."""
    import onnxruntime

    model, flags = platform.processor(), set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            name, _, value = line.partition(":")
            if name.strip() in ("model name", "CPU part") and not model:
                model = value.strip()
            if name.strip() in ("flags", "Features"):
                flags = set(value.split())
    parts = [
        platform.machine(),
        model,
        ",".join(f for f in _FEATURES if f in flags),
        str(os.cpu_count()),
        str(threads or 0),
        str(onnxruntime.__version__),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def pick_graph(
    runtime: GraphRuntime,
    variants: Mapping[str, Variant],
    wanted: str,
    request: Request,
    *,
    threads: int | None,
    store: Path | None,
    clock: Callable[[], float] = time.perf_counter,
) -> str:
    """Put `runtime` on the graph `wanted` names ("auto": the one kept for this machine in
    `store`, or measured now and kept there); the graph's name. ModelUnavailable when a
    named graph was not made here."""
    if wanted != "auto":
        if wanted not in variants:
            made = ", ".join(variants)
            raise ModelUnavailable(
                f"--graph {wanted}: this export has no {wanted} graph (made here: {made}; "
                "see the log of the variants' build)."
            )
        runtime.use_graph(variants[wanted])
        return wanted
    if len(variants) == 1:
        return "float"
    key = machine_key(threads)
    kept = _kept(store, key)
    if kept in variants:
        try:
            runtime.use_graph(variants[kept])
        except ModelUnavailable as exc:
            log.warning("the %s graph kept for this machine cannot open (%s)", kept, exc.message)
        else:
            log.info("graph %s (measured before on this machine; %s)", kept, store)
            return kept
    measured = measure_graphs(runtime, variants, request, clock)
    chosen = choose_graph(measured)
    runtime.use_graph(variants[chosen])
    log.info(
        "graph %s, measured: %s",
        chosen,
        ", ".join(
            f"{n} {m.cost_s * 1000:.0f} ms ({m.distance_db:.2f} dB)" for n, m in measured.items()
        ),
    )
    _keep(store, key, chosen, measured)
    return chosen


def _kept(store: Path | None, key: str) -> str | None:
    if store is None:
        return None
    try:
        entry = json.loads((store / CHOICE_FILE).read_text(encoding="utf-8")).get(key, {})
    except (OSError, ValueError, AttributeError):
        return None
    graph = entry.get("graph") if isinstance(entry, dict) else None
    return graph if isinstance(graph, str) else None


def _keep(store: Path | None, key: str, chosen: str, measured: Mapping[str, Measured]) -> None:
    """Write the choice beside the variants (best effort: a read-only folder measures anew at
    every start)."""
    if store is None:
        return
    path = store / CHOICE_FILE
    try:
        kept = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        kept = {}
    if not isinstance(kept, dict):
        kept = {}
    kept[key] = {
        "graph": chosen,
        "cost_ms": {n: round(m.cost_s * 1000, 1) for n, m in measured.items()},
        "distance_db": {n: round(m.distance_db, 3) for n, m in measured.items()},
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    staging = path.with_name(f".{CHOICE_FILE}.{os.getpid()}")
    try:
        staging.write_text(json.dumps(kept, indent=1), encoding="utf-8")
        os.replace(staging, path)
    except OSError as exc:
        log.info("the graph chosen cannot be kept in %s (%s): measured again next start", path, exc)
        with contextlib.suppress(OSError):
            staging.unlink()
