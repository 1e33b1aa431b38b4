"""The load generator: speechd against its baselines, one report.

    python -m loadtest run --model-dir ~/.cache/speechd/kokoro-82m [--quick] [--out DIR]
        [--device cpu] [--threads N] [--servers speechd,speechd-fifo,speechd-onnx,naive]
        [--only SCENARIOS]
    python -m loadtest run --server http://127.0.0.1:8000 [--server-pid PID] [--model-dir DIR]
    python -m loadtest run --slow-device [--slow-rtf 1.3] [--slow-overhead 0.4] [--quick]
    python -m loadtest run ... [--max-batch auto|N] [--levels 1,4,8,16]
    python -m loadtest run --cost-model gpu [--slow-rtf 0.05] [--slow-overhead 0.25]
        [--max-batch auto|N] [--levels 1,4,8,16] [--only concurrency-1,...]
    python -m loadtest run ... [--texts 8] [--fresh]
    python -m loadtest report DIR/report.json

`run` measures the raw engine loop in this process, on torch and on ONNX Runtime (the
physical limit of each; skipped with --server and no --model-dir; a full run measures them
again at the end and keeps the best round), then starts each server on a fresh data folder:
`speechd serve --engine torch` (deadline policy), `speechd serve --policy fifo`, `speechd
serve --engine onnx` (speechd-onnx, measured against the ONNX Runtime raw loop) and the naive
baseline (`loadtest.naive_server`, torch), and runs each scenario of
`loadtest._scenarios` on every server in turn: a concurrency sweep, staggered arrivals, 50
listeners on one cast and 8 identical requests at once. With --server it measures that running
server alone (its memory too, given its pid). It writes report.json, report.md and PNG plots
to --out (default loadtest/results, where the committed report lives) after each scenario, so
an interrupted run still leaves a report.
`--max-batch` is passed to every speechd server the run starts (`auto`, speechd's default, or
N; run once with `--max-batch 1` and once with `auto`, each to its own --out, to compare);
`--levels` replaces the concurrency sweep's levels (1, 2, 4, 8). `--cost-model gpu` runs the
speechd servers (speechd, speechd-fifo) on a cost model of a device that batches as a GPU
does (`loadtest._slow.GPU_CURVE`: ~0.3x per item at batch 8; `--slow-rtf` and
`--slow-overhead` are its cost per audio second and per call, 0.05 and 0.25 s by default:
a device bound by per-call overhead) instead of the model: no model, no raw loop.
`--texts N` makes each level of the concurrency sweep N texts through a closed loop of
`level` clients, and `--fresh` starts the servers afresh for every scenario: together, the
side-by-side benchmark of issue 31 (8 texts at c=1, 2, 4, a fresh server per level), where
a worker's costs are only its warm-up's when the first listener comes.
`report` redraws report.md and the plots from a report.json.
`run --slow-device` is the slow-device mode (`loadtest._slowrun`): speechd and Kokoro-FastAPI-
style whole-chunk serving on a cost model of a device slower than real time, against the raw
loop; it writes slow.md and slow.json to --out and needs no model.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

import msgspec

from speechd.engine import parse_device

from ._client import new_client, run_scenario
from ._report import load_report, write_report
from ._results import Machine, RawResult, Run, ScenarioRun, WorkerMetrics, summarize
from ._scenarios import (
    NAIVE,
    SPEECHD,
    SPEECHD_FIFO,
    SPEECHD_ONNX,
    TARGETS,
    Request,
    Scenario,
    scenarios,
)
from ._servers import Server, start_naive, start_slow_speechd, start_speechd

GPU_RTF = 0.05
"""`--cost-model gpu`'s compute seconds per audio second at batch 1."""
GPU_OVERHEAD_S = 0.25
"""`--cost-model gpu`'s seconds per model call: a pass bound by per-call overhead (kernel
launches, a Jetson's slow host), which is where batching pays."""

RAW_TEXTS = 4
"""The raw loop reads this many of the saturation scenario's texts (each round)."""

_WARM_UP = Request(0.0, "Warming up.", "warm-up")

DEFAULT_OUT = Path(__file__).resolve().parent / "results"


def _machine(device: str, threads: int | None) -> Machine:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if "model name" in line)
    except (OSError, StopIteration):
        pass
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return Machine(
        cpu=cpu,
        cores=os.cpu_count() or 0,
        ram_gib=pages / 2**30,
        torch=str(torch.__version__),
        threads=threads or torch.get_num_threads(),
        device=device,
        python=platform.python_version(),
        load_before=os.getloadavg()[0],
    )


def _raw(args: argparse.Namespace, texts: Sequence[str], engine_name: str) -> RawResult:
    from speechd.engine import EngineConfig, load_engine
    from speechd.text import ChunkPolicy

    from ._raw import lone_cast_policy, raw_loop

    engine = load_engine(
        EngineConfig(
            model_dir=args.model_dir, device=args.device, threads=args.threads, engine=engine_name
        )
    )
    raw = raw_loop(engine, lone_cast_policy(engine, ChunkPolicy()), texts)
    del engine
    gc.collect()  # the servers get the memory, not this process
    return RawResult(raw.audio_s, raw.gen_s, raw.rtf, raw.capacity, raw.chunks, raw.chunk_time_s)


def _raw_round(run: Run, args: argparse.Namespace, texts: Sequence[str]) -> None:
    """The raw loop of each runtime a server runs on (torch; ONNX Runtime for speechd-onnx)."""
    servers = [SPEECHD] if args.server else args.servers
    if any(s != SPEECHD_ONNX for s in servers):
        print("raw torch engine loop on the saturation scenario's texts ...", flush=True)
        raw = _raw(args, texts, "torch")
        print(f"  rtf {raw.rtf:.3f}, capacity {raw.capacity:.2f} audio s/s", flush=True)
        run.raw_rounds.append(raw)
        run.raw = max(run.raw_rounds, key=lambda r: r.capacity)
    if SPEECHD_ONNX in servers:
        print("raw ONNX Runtime engine loop on the same texts ...", flush=True)
        raw = _raw(args, texts, "onnx")
        print(f"  rtf {raw.rtf:.3f}, capacity {raw.capacity:.2f} audio s/s", flush=True)
        run.raw_onnx_rounds.append(raw)
        run.raw_onnx = max(run.raw_onnx_rounds, key=lambda r: r.capacity)


def _start(name: str, args: argparse.Namespace, workdir: Path) -> Server:
    engine = {"model_dir": args.model_dir, "device": args.device, "threads": args.threads}
    if name == NAIVE:
        return start_naive(name, workdir=workdir, **engine)
    policy = "fifo" if name == SPEECHD_FIFO else "deadline"
    runtime = "onnx" if name == SPEECHD_ONNX else "torch"
    extra = ["--max-batch", args.max_batch] if args.max_batch else []
    if args.cost_model == "gpu":
        return start_slow_speechd(
            name,
            rtf=args.slow_rtf if args.slow_rtf is not None else GPU_RTF,
            overhead_s=args.slow_overhead if args.slow_overhead is not None else GPU_OVERHEAD_S,
            workdir=workdir,
            start="",
            batch_curve="gpu",
            extra=["--policy", policy, *extra],
        )
    return start_speechd(
        name, policy=policy, workdir=workdir, engine=runtime, extra=extra, **engine
    )


async def _measure(
    run: Run, servers: Sequence[Server], plan: Sequence[Scenario], out: Path
) -> None:
    """Each scenario on every server in turn, the order rotating from one scenario to the next:
    on a shared machine the neighbours' load drifts over minutes, and interleaving spreads it
    over the servers instead of handing one server all of a busy spell."""
    async with new_client() as client:
        # One short request first, so no scenario pays for a server's first-request costs.
        for server in servers:
            await run_scenario(client, server, Scenario("warm-up", "warm-up", (_WARM_UP,)))
        for number, scenario in enumerate(plan):
            turn = number % len(servers)
            for server in [*servers[turn:], *servers[:turn]]:
                if server.name in scenario.targets:
                    result = await run_scenario(client, server, scenario)
                    print(_line(result), flush=True)
                    run.runs.append(result)
            write_report(run, out)  # so far: an interrupted run still leaves a report


def _line(run: ScenarioRun) -> str:
    s = summarize(run, None)
    errors = sum(s.errors.values())
    rss = (
        f", rss api {s.rss_peak.api_mib:.0f} / worker {s.rss_peak.worker_mib:.0f} MiB"
        if s.rss_peak
        else ""
    )
    return (
        f"  {run.target:13s} {run.scenario:14s} TTFA p50 {s.ttfa_p50_s or 0:6.2f} s"
        f" max {s.ttfa_max_s or 0:6.2f} s, underruns {s.underruns:3d} ({s.gap_ms:6.0f} ms),"
        f" {s.throughput:5.2f} audio s/s in {run.wall_s:5.1f} s, errors {errors}{rss}"
        f"{_telemetry(s.worker_metrics)}"
    )


def _telemetry(m: WorkerMetrics | None) -> str:
    """The worker's own figures, as speechd's /metrics gave them."""
    if m is None or m.cpu_percent_mean is None:
        return ""
    text = (
        f"; /metrics: worker cpu {m.cpu_percent_mean:.0f}% mean {m.cpu_percent_max or 0:.0f}%"
        f" max, rss {m.rss_mib_max or 0:.0f} MiB"
    )
    if m.power_w_mean is not None:
        text += f", {m.power_w_mean:.1f} W"
    if m.joules_per_audio_s is not None:
        text += f", {m.joules_per_audio_s:.2f} J per audio s"
    if m.max_batch is not None:
        per_step = "-" if m.chunks_per_step is None else f"{m.chunks_per_step:.2f}"
        text += f", max batch {m.max_batch} ({per_step} chunks per step)"
    return text


def _run(args: argparse.Namespace) -> int:
    began = time.monotonic()
    plan = [
        s
        for s in scenarios(args.quick, args.levels, args.texts)
        if not args.only or s.name in args.only
    ]
    targets = [SPEECHD] if args.server else args.servers
    run = Run(
        started=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        quick=args.quick,
        machine=_machine(args.device, args.threads),
        raw=None,
        runs=[],
    )
    sweep = [s for s in plan if s.concurrency]
    raw_texts: list[str] = []
    if sweep and (args.model_dir or not args.server) and not args.cost_model:
        saturation = max(sweep, key=lambda s: s.concurrency or 0)
        raw_texts += [r.text for r in saturation.requests[:RAW_TEXTS]]
        _raw_round(run, args, raw_texts)
    with tempfile.TemporaryDirectory(prefix="speechd-loadtest-") as workdir:
        # --fresh: each scenario on servers started for it (as a side-by-side benchmark
        # starts a fresh server per level: the worker's costs are its warm-up's, no more).
        rounds = [[scenario] for scenario in plan] if args.fresh and not args.server else [plan]
        for scenarios_now in rounds:
            _measure_on_servers(run, args, targets, scenarios_now, Path(workdir))
    if raw_texts and not args.quick:  # again, for a figure less at the mercy of neighbours
        _raw_round(run, args, raw_texts)
    run.machine = _with_load_after(run.machine)
    run.wall_s = time.monotonic() - began
    report = write_report(run, args.out)
    for goal in report.goals:
        print(f"goal: {goal.goal}: {goal.measured} -> {goal.met}")
    print(f"report: {args.out / 'report.md'} ({run.wall_s:.0f} s)")
    return 0


def _measure_on_servers(
    run: Run,
    args: argparse.Namespace,
    targets: Sequence[str],
    plan: Sequence[Scenario],
    workdir: Path,
) -> None:
    """Start `targets` (or take --server), run `plan` on them, stop them."""
    servers: list[Server] = []
    try:
        for target in targets:
            if args.server:
                server = Server(SPEECHD, args.server.rstrip("/"), args.server_pid)
            else:
                server = _start(target, args, workdir)
            servers.append(server)
            print(f"{target}: waiting for {server.url}/readyz ...", flush=True)
            server.wait_ready()  # one at a time: loading models side by side thrashes
        asyncio.run(_measure(run, servers, plan, args.out))
    finally:
        for server in servers:
            server.stop()


def _with_load_after(machine: Machine) -> Machine:
    return msgspec.structs.replace(machine, load_after=os.getloadavg()[0])


def _report(args: argparse.Namespace) -> int:
    report = load_report(args.json)
    write_report(report.run, args.json.parent)
    print(f"report: {args.json.parent / 'report.md'}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest", description=__doc__.split("\n\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="measure and write a report")
    run.add_argument("--model-dir", default=os.environ.get("SPEECHD_MODEL_DIR"))
    run.add_argument(
        "--device", default="cpu", type=parse_device, help="auto, cpu, cuda or cuda:N (cpu)"
    )
    run.add_argument("--threads", type=int, help="CPU threads per server and for the raw loop")
    run.add_argument("--quick", action="store_true", help="small scenarios (< 3 minutes)")
    run.add_argument("--out", type=Path, default=DEFAULT_OUT, help="report folder")
    run.add_argument(
        "--servers",
        type=lambda v: [t.strip() for t in v.split(",") if t.strip()],
        default=list(TARGETS),
        help=f"which to start (default {','.join(TARGETS)})",
    )
    run.add_argument(
        "--only",
        type=lambda v: [t.strip() for t in v.split(",") if t.strip()],
        help="run only these scenarios, e.g. concurrency-1,dedupe-8",
    )
    run.add_argument("--server", help="measure this running speechd instead of starting any")
    run.add_argument("--server-pid", type=int, help="its process id, to read its memory")
    run.add_argument(
        "--slow-device",
        action="store_true",
        help="the slow-device mode: a cost-model engine slower than real time (no model)",
    )
    run.add_argument(
        "--slow-rtf",
        type=float,
        help="the cost model's compute s per audio s (slow device 1.3, gpu 0.05)",
    )
    run.add_argument(
        "--slow-overhead",
        type=float,
        help="the cost model's s per model call (slow device 0.4, gpu 0.25)",
    )
    run.add_argument(
        "--max-batch",
        metavar="auto|N",
        help="passed to every speechd server started (default: speechd's, auto)",
    )
    run.add_argument(
        "--levels",
        type=lambda v: [int(t) for t in v.split(",") if t.strip()],
        help="the concurrency sweep's levels, e.g. 1,4,8,16 (default 1,2,4,8; quick 1,2,4)",
    )
    run.add_argument(
        "--texts",
        type=int,
        help="each level of the concurrency sweep sends this many texts through a closed "
        "loop of `level` clients (default: `level` texts at once)",
    )
    run.add_argument(
        "--fresh",
        action="store_true",
        help="start the servers afresh for every scenario (a fresh server per level)",
    )
    run.add_argument(
        "--cost-model",
        choices=["gpu"],
        help="run the speechd servers on a cost model of a device that batches as a GPU "
        "does, instead of the model (no raw loop)",
    )
    report = commands.add_parser("report", help="redraw report.md and plots from report.json")
    report.add_argument("json", type=Path)
    args = parser.parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so the servers this run started are stopped too.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if args.command == "run":
        unknown = set(args.servers) - set(TARGETS)
        if unknown:
            parser.error(
                f"--servers: unknown {', '.join(sorted(unknown))} (know {', '.join(TARGETS)})"
            )
        if args.cost_model and set(args.servers) - {SPEECHD, SPEECHD_FIFO}:
            args.servers = [s for s in args.servers if s in (SPEECHD, SPEECHD_FIFO)]
        try:
            if args.slow_device:
                args.slow_rtf = 1.3 if args.slow_rtf is None else args.slow_rtf
                args.slow_overhead = 0.4 if args.slow_overhead is None else args.slow_overhead
                from ._slowrun import run_slow

                return run_slow(args)
            return _run(args)
        except KeyboardInterrupt:  # the servers are stopped; the report so far is written
            print(f"interrupted; the report so far: {args.out / 'report.md'}", file=sys.stderr)
            return 130
    return _report(args)


if __name__ == "__main__":
    sys.exit(main())
