"""ONNX Runtime's session settings for the decoder on this CPU: each decoder graph (float, fused,
int8) under speechd's settings and under each alternative, on the same real chunks, wall and
CPU time side by side (printed figures, not a test).

    python -m loadtest.bench_graphs --model-dir ~/.cache/speechd/kokoro-82m [--rounds 3]
        [--threads N] [--steps]

--steps prints instead each float rewrite's own figure (`speechd.engine._graph_rewrites`):
the float graph, then the steps applied one after another, each graph's wall and CPU time
under speechd's settings against the float graph's in the same run, its distance from the
float graph's audio (dB), and the sites each step rewrote.

speechd opens its sessions with ONNX Runtime's own graph optimisation (all levels), its
memory arena, memory patterns off (every chunk has a new shape), one inter-op thread and
`--threads` intra-op threads (default: ONNX Runtime's, the physical cores), spinning as ONNX
Runtime does by default. The alternatives: spinning off, one thread, every logical core,
the intra-op threads pinned to cores, the extended and basic optimisation levels, no arena,
denormals flushed to zero. Each setting's decoder runs the check lines of the int8
calibration set (`speechd.engine._calibration.CHECK`, through the export's front), in
rounds interleaved across settings (the fastest round counts, so a neighbour's burst
costs every setting alike), one session open at a time (each is opened, run once untimed,
timed, and let go); each line is the decoder's whole chunk, as the worker runs it.
Printed: per graph and setting, wall seconds, CPU seconds (spinning burns CPU a loaded
machine's other processes could have had), the ratio to speechd's settings in the same
run, and the load average before and after. The graphs are those the worker built
(`speechd serve --graph auto` builds them; so does `bench_engine --graphs`).

Measured on the shared 2-core AVX-512 machine this was written on, CPU time on one thread
(the only figure its load leaves meaningful): the extended level 1.04x and basic 1.06x
speechd's on the fused graph, no arena 1.24x, denormals flushed 1.01x; on int8 all within
2%. So speechd keeps ONNX Runtime's defaults there; threads, spinning and pinning are the
wall-clock questions this benchmark answers on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SETTINGS: dict[str, dict[str, Any]] = {
    "speechd": {},
    "no spinning": {"spin": False},
    "1 thread": {"threads": 1},
    "every core": {"threads": os.cpu_count() or 1},
    "pinned": {"pinned": True},
    "extended": {"level": "extended"},
    "basic": {"level": "basic"},
    "no arena": {"arena": False},
    "denormals 0": {"denormal": True},
}


def session(path: Path, default_threads: int | None, **setting: Any) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    count = setting.get("threads", default_threads) or 0
    options.intra_op_num_threads = count
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.enable_mem_pattern = False
    options.log_severity_level = 3
    level = setting.get("level")
    if level is not None:
        options.graph_optimization_level = {
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        }[level]
    options.enable_cpu_mem_arena = setting.get("arena", True)
    if not setting.get("spin", True):
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if setting.get("denormal"):
        options.add_session_config_entry("session.set_denormal_as_zero", "1")
    if setting.get("pinned"):
        # Threads past the caller's, each on its own logical core (1-based, ';'-separated).
        cores = count or os.cpu_count() or 1
        affinity = ";".join(str(n + 1) for n in range(1, cores))
        if affinity:
            options.add_session_config_entry("session.intra_op_thread_affinities", affinity)
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def main(argv: Sequence[str] | None = None) -> int:
    from speechd.engine._export import default_cache_dir, find_export
    from speechd.engine._files import open_model_folder
    from speechd.engine._variants import decoder_feeds, find_variants

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--cache-dir", type=Path, default=default_cache_dir())
    parser.add_argument("--threads", type=int, help="speechd's --threads (default: ORT's)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", action="store_true", help="each float rewrite's figure")
    args = parser.parse_args(argv)
    folder = open_model_folder(args.model_dir)
    export = find_export(folder, args.cache_dir)
    if export is None:
        parser.error("no export of these weights yet: start speechd (or bench_engine) once")
    graphs = find_variants(export, args.cache_dir) or {}
    if len(graphs) < 2:
        print("no graph variants built yet: only the float graph is measured", flush=True)
        from speechd.engine._variants import Variant

        graphs = {"float": Variant("float", export / "back.onnx", "", 0.0)}
    _, feeds = decoder_feeds(export, folder.root)
    before = os.getloadavg()[0]
    print(
        f"bench_graphs: {os.cpu_count()} logical cores, threads {args.threads or 'default'}, "
        f"{len(feeds)} chunks per run, load average {before:.1f}",
        flush=True,
    )
    if args.steps:
        steps(export / "back.onnx", feeds, args)
        print(f"\nload average before {before:.1f}, at the end {os.getloadavg()[0]:.1f}")
        return 0
    for name, graph in graphs.items():
        wall = dict.fromkeys(SETTINGS, float("inf"))
        cpu = dict.fromkeys(SETTINGS, float("inf"))
        for _ in range(args.rounds):
            for label, setting in SETTINGS.items():
                # One session at a time (each holds its own ~250 MB of weights).
                s = session(graph.path, args.threads, **setting)
                s.run(None, feeds[0])  # untimed: the first run's allocations
                began, used = time.perf_counter(), time.process_time()
                for feed in feeds:
                    s.run(None, feed)
                wall[label] = min(wall[label], time.perf_counter() - began)
                cpu[label] = min(cpu[label], time.process_time() - used)
                del s
        print(f"\n{name} graph ({graph.path.name})")
        print(f"   {'setting':<13} {'wall s':>7} {'ratio':>6} {'CPU s':>7} {'ratio':>6}")
        for label in SETTINGS:
            print(
                f"   {label:<13} {wall[label]:>7.2f} {wall[label] / wall['speechd']:>5.2f}x "
                f"{cpu[label]:>7.2f} {cpu[label] / cpu['speechd']:>5.2f}x"
            )
    print(f"\nload average before {before:.1f}, at the end {os.getloadavg()[0]:.1f}")
    return 0


def steps(back: Path, feeds: Sequence[dict[str, Any]], args: argparse.Namespace) -> None:
    """The float graph, then each rewrite step on top of the ones before (see --steps)."""
    import tempfile

    import onnx

    from speechd.engine._graph_rewrites import STEPS, optimise
    from speechd.engine._quality import log_spectral_distance

    model = onnx.load(str(back))
    with tempfile.TemporaryDirectory(prefix="speechd-steps-") as scratch:
        graphs, sites = [("float graph", back)], {}
        for name, _ in STEPS:
            sites[name] = optimise(model, [name]).sites[name]
            path = Path(scratch) / f"{name}.onnx"
            onnx.save(model, str(path))
            graphs.append((f"+ {name}", path))
        del model
        wall = dict.fromkeys((label for label, _ in graphs), float("inf"))
        cpu = dict.fromkeys(wall, float("inf"))
        audio: dict[str, list[Any]] = {}
        for _ in range(args.rounds):
            for label, path in graphs:
                s = session(path, args.threads)
                s.run(None, feeds[0])
                began, used = time.perf_counter(), time.process_time()
                audio[label] = [s.run(None, feed)[0] for feed in feeds]
                wall[label] = min(wall[label], time.perf_counter() - began)
                cpu[label] = min(cpu[label], time.process_time() - used)
                del s
    base = "float graph"
    head = f"{'graph':<22} {'sites':>5} {'wall s':>7} {'ratio':>6} {'CPU s':>7} {'ratio':>6}"
    print(f"\n   {head} {'dB':>5}")
    for label, _ in graphs:
        distance = max(
            log_spectral_distance(a, b) for a, b in zip(audio[label], audio[base], strict=True)
        )
        count = sites.get(label[2:], "")
        print(
            f"   {label:<22} {count:>5} {wall[label]:>7.2f} {wall[label] / wall[base]:>5.2f}x "
            f"{cpu[label]:>7.2f} {cpu[label] / cpu[base]:>5.2f}x {distance:>5.2f}"
        )


if __name__ == "__main__":
    sys.exit(main())
