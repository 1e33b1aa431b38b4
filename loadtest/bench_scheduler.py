"""The worker's scheduling on the real model: the deadline policy against FIFO, same run.

    python -m loadtest.bench_scheduler --model-dir ~/.cache/speechd/kokoro-82m [--load 0.7]
        [--quick] [--rounds N] [--threads 2] [--quantum S] [--lead S] [--json out.json]

1. **Raw engine loop.** Every chunk of the workload's casts synthesized back to back, no store,
   no scheduler, each cast planned as the worker plans one alone (its quantum included): the
   engine's real-time factor, its capacity (audio seconds per wall second), and the median
   chunk time (one "chunk-time"). It runs between the policies' runs (both staggered runs, then
   each saturation run, alone), and each run's ratio is against the mean of the raw loops just
   before and after it: this machine's speed drifts by 10-20% over minutes.
2. **Staggered arrivals.** Long and short casts arrive spaced so that the offered load (audio
   requested per second, times the raw rtf) is `--load` of capacity. For each policy, on a fresh
   store, an in-process worker on the same engine serves them while a simulated listener per
   cast plays in real time from its first audio: time to first audio (p50, max, and in
   chunk-times), underruns (a record landing after its playback deadline; the listener then
   stalls) and the total gap.
3. **Saturation.** Every cast at once: throughput (audio seconds per wall second, first submit
   to last eos) per policy, next to the raw loop's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import msgspec

from speechd.audio import new_encoder
from speechd.casts import cast_id, follow_cast, submit
from speechd.casts.schema import PROGRESS_DONE, AudioChunk, Eos, Failure, Receipt, Recipe, decode
from speechd.durable import Store, open_store
from speechd.worker import QUANTUM_S, Worker, WorkerConfig

from ._listener import Listener
from ._raw import RawLoop, lone_cast_policy, on_own_thread, raw_loop
from ._workload import VOICE, paragraph

FORMAT = "mp3"


@dataclass
class CastSpec:
    name: str
    text: str
    arrival: float = 0.0
    audio_s: float = 0.0  # measured in the raw loop


@dataclass
class PolicyRun:
    policy: str
    scenario: str
    ttfa_p50_s: float
    ttfa_max_s: float
    ttfa_max_chunk_times: float
    underruns: int
    gap_ms: float
    audio_s: float
    wall_s: float
    throughput: float
    worker_rtf: float  # the engine's compute (synthesis + encoding) per audio second, in the worker
    engine_busy: float  # the fraction of the wall time the engine was computing
    chunks: int  # the raw loop makes the same audio in `RawLoop.chunks`
    raw_capacity: float = 0.0  # the mean of the raw loops run just before and after it
    per_cast: list[dict[str, Any]] = field(default_factory=list)


def workload(quick: bool) -> list[CastSpec]:
    """Long casts with short and medium ones between them: (sentences, kind). The short ones
    arrive while a long one is still being made."""
    shape = [(14, "long"), (1, "short"), (2, "short"), (4, "medium"), (1, "short"), (10, "long")]
    if not quick:
        shape += [(1, "short"), (2, "short"), (3, "medium"), (1, "short")]
    return [
        CastSpec(f"{n:02d}-{kind}", paragraph(sentences, 3 * n))
        for n, (sentences, kind) in enumerate(shape)
    ]


async def serve(
    engine: Any,
    chunk_policy: Any,
    policy: WorkerConfig,
    label: str,
    casts: list[CastSpec],
    scenario: str,
    chunk_time: float,
    quantum_s: float,
) -> PolicyRun:
    with tempfile.TemporaryDirectory(prefix="speechd-bench-") as data:
        store = await open_store(data)
        try:
            config = msgspec.structs.replace(
                policy, worker_id=f"bench-{policy.policy}", quantum_s=quantum_s
            )
            worker = Worker(store, engine, config, chunk_policy=chunk_policy, encoders=new_encoder)
            await worker.warm_up(VOICE)  # as a worker process does before it is ready
            stop = asyncio.Event()
            running = asyncio.create_task(worker.run(stop))
            began = time.monotonic()
            listeners = await asyncio.gather(*(listen(store, spec, began) for spec in casts))
            wall = max(x.ended or 0.0 for x in listeners) - began
            stop.set()
            await running
            await worker.idle()
            receipts = [
                decode(r.body, Receipt) for r in (await store.read(PROGRESS_DONE, 0)).records
            ]
        finally:
            await store.close()
    ttfas = [x.ttfa for x in listeners if x.ttfa is not None]
    audio = sum(x.received_s for x in listeners)
    gen_s = sum(r.gen_ms for r in receipts) / 1000
    return PolicyRun(
        policy=label,
        scenario=scenario,
        ttfa_p50_s=statistics.median(ttfas),
        ttfa_max_s=max(ttfas),
        ttfa_max_chunk_times=max(ttfas) / chunk_time,
        underruns=sum(x.underruns for x in listeners),
        gap_ms=1000 * sum(x.stall_s for x in listeners),
        audio_s=audio,
        wall_s=wall,
        throughput=audio / wall,
        worker_rtf=gen_s / audio,
        engine_busy=gen_s / wall,
        chunks=sum(r.chunks for r in receipts),
        per_cast=[
            {
                "cast": spec.name,
                "arrival_s": round(spec.arrival, 2),
                "audio_s": round(x.received_s, 2),
                "ttfa_s": None if x.ttfa is None else round(x.ttfa, 2),
                "underruns": x.underruns,
                "gap_ms": round(1000 * x.stall_s),
                "failed": x.error,
                "buffered": x.timeline,
            }
            for spec, x in zip(casts, listeners, strict=True)
        ],
    )


async def listen(store: Store, spec: CastSpec, began: float) -> Listener:
    await asyncio.sleep(max(0.0, began + spec.arrival - time.monotonic()))
    secret = b"bench"
    cid = cast_id(secret, model="kokoro", voice=VOICE, speed=1.0, format=FORMAT, text=spec.text)
    recipe = Recipe(
        text=spec.text,
        model="kokoro",
        voice=VOICE,
        speed=1.0,
        format=FORMAT,
        title=spec.name,
        created_ms=int(time.time() * 1000),
    )
    listener = Listener(submitted=time.monotonic())
    await submit(store, cid, recipe, sample_rate=24_000)
    async for event in follow_cast(store, cid):
        now = time.monotonic()
        if isinstance(event, AudioChunk):
            listener.receive(now, event.duration_ms / 1000)
        elif isinstance(event, Eos | Failure):
            listener.end(now, event.message if isinstance(event, Failure) else None)
    return listener


def staggered(casts: list[CastSpec], load: float, capacity: float) -> list[CastSpec]:
    """Arrivals evenly spaced so the audio requested per second is `load` of capacity: long
    casts are still playing when the next ones arrive."""
    gap = sum(c.audio_s for c in casts) / (load * capacity) / len(casts)
    return [CastSpec(c.name, c.text, n * gap, c.audio_s) for n, c in enumerate(casts)]


def print_run(run: PolicyRun) -> None:
    print(
        f"  {run.policy:19s} first audio p50 {run.ttfa_p50_s:5.2f} s, max {run.ttfa_max_s:5.2f} s"
        f" ({run.ttfa_max_chunk_times:4.1f} chunk-times); underruns {run.underruns:2d},"
        f" gaps {run.gap_ms:6.0f} ms; {run.throughput:4.2f} audio s/s"
        f" ({run.throughput / run.raw_capacity:4.2f}x raw) in {run.wall_s:5.1f} s;"
        f" engine busy {run.engine_busy:4.0%} at rtf {run.worker_rtf:.3f}, {run.chunks} chunks"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", default=os.environ.get("SPEECHD_MODEL_DIR"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--load", type=float, default=0.7, help="offered load / capacity")
    parser.add_argument("--quick", action="store_true", help="six casts instead of ten")
    parser.add_argument("--casts", type=int, help="only the first N casts of the workload")
    parser.add_argument(
        "--rounds", type=int, default=1, help="repeat raw loop + both policies (noisy hosts)"
    )
    parser.add_argument("--max-tokens", type=int, help="cap chunks (ChunkPolicy.max_tokens)")
    parser.add_argument(
        "--quantum", type=float, default=QUANTUM_S, help=f"longest chunk, s ({QUANTUM_S})"
    )
    parser.add_argument(
        "--lead",
        type=float,
        default=WorkerConfig().comfortable_lead_s,
        help=f"the deadline policy's comfortable lead, s ({WorkerConfig().comfortable_lead_s})",
    )
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()

    from speechd.engine import EngineConfig, load_engine
    from speechd.text import ChunkPolicy

    # Torch runs only on threads that end (the worker's own engine thread included): see
    # `on_own_thread`.
    engine = on_own_thread(
        load_engine,
        EngineConfig(model_dir=args.model_dir, device=args.device, threads=args.threads),
    )
    casts = workload(args.quick)[: args.casts]
    texts = [c.text for c in casts]
    chunk_policy = ChunkPolicy()
    if args.max_tokens:
        chunk_policy = msgspec.structs.replace(
            chunk_policy,
            max_tokens=args.max_tokens,
            sentence_tokens=min(chunk_policy.sentence_tokens, args.max_tokens),
        )
    raw_policy = on_own_thread(lone_cast_policy, engine, chunk_policy)
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs,"
        f" device {engine.device}, load average {os.getloadavg()[0]:.1f};"
        f" quantum {args.quantum:.1f} s (lone-cast plan: rtf {raw_policy.rtf:.3f}"
        f" + {raw_policy.overhead_s:.2f} s a chunk, chunks up to {raw_policy.max_chunk_s:.1f} s),"
        f" comfortable lead {args.lead:.0f} s"
    )
    report: dict[str, Any] = {"load": args.load, "quantum_s": args.quantum, "rounds": []}
    arrivals: list[CastSpec] = []
    summary: list[PolicyRun] = []
    for number in range(args.rounds):
        raw = on_own_thread(raw_loop, engine, raw_policy, texts)
        print_raw(f"round {number + 1}: raw engine loop", raw)
        for spec, audio_s in zip(casts, raw.per_text_audio_s, strict=True):
            spec.audio_s = audio_s
        if not arrivals:  # the same arrivals every round
            arrivals = staggered(casts, args.load, raw.capacity)
        print(
            f"  staggered: {len(casts)} casts, {sum(c.audio_s for c in casts):.0f} s of audio,"
            f" arriving over {arrivals[-1].arrival:.0f} s"
            f" (offered load {args.load:.0%} of the first round's capacity)"
        )
        chunk_time = raw.chunk_time_s
        burst = [CastSpec(c.name, c.text, 0.0, c.audio_s) for c in casts]
        raws = [raw]
        results: list[PolicyRun] = []
        for leg in legs(arrivals, burst, args.lead):
            runs = [
                asyncio.run(
                    serve(
                        engine,
                        chunk_policy,
                        policy,
                        label,
                        specs,
                        scenario,
                        chunk_time,
                        args.quantum,
                    )
                )
                for scenario, specs, label, policy in leg
            ]
            for run in runs:
                print(f"  {run.scenario}, {run.policy}: done in {run.wall_s:.0f} s", flush=True)
            raw = on_own_thread(raw_loop, engine, raw_policy, texts)
            print_raw("  raw engine loop", raw)
            for run in runs:
                run.raw_capacity = (raws[-1].capacity + raw.capacity) / 2
            raws.append(raw)
            results += runs
        print("  ratios against the mean of the raw loops just before and after each run:")
        print_runs(results)
        summary += results
        report["rounds"].append(
            {"raw": [asdict(r) for r in raws], "runs": [asdict(run) for run in results]}
        )
    if args.rounds > 1:
        print_summary(summary)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=2)


def legs(
    arrivals: list[CastSpec], burst: list[CastSpec], lead: float
) -> list[list[tuple[str, list[CastSpec], str, WorkerConfig]]]:
    """The runs of a round, in legs with a raw engine loop between them: the saturation runs,
    whose throughput is the figure the raw loop is for, each have raw loops next to them."""
    deadline = WorkerConfig(policy="deadline", comfortable_lead_s=lead)
    fifo = WorkerConfig(policy="fifo")
    unpaced = WorkerConfig(policy="deadline", comfortable_lead_s=1e9)
    return [
        [
            ("staggered", arrivals, "deadline", deadline),
            ("staggered", arrivals, "fifo", fifo),
        ],
        [("saturation", burst, "deadline", deadline)],
        [("saturation", burst, "fifo", fifo)],
        # The deadline policy paces a cast that is far ahead (it sleeps, keeping the device
        # free for newcomers), so the last cast of a burst may end later than it could:
        # without pacing, the run shows the scheduling overhead alone.
        [("saturation", burst, "deadline, no pacing", unpaced)],
    ]


def print_summary(runs: list[PolicyRun]) -> None:
    """Per policy over all rounds: every throughput ratio and their median, the worst first
    audio, and the underruns summed."""
    print("all rounds, per policy:")
    for key in dict.fromkeys((r.scenario, r.policy) for r in runs):
        same = [r for r in runs if (r.scenario, r.policy) == key]
        ratios = [r.throughput / r.raw_capacity for r in same]
        worst = max(same, key=lambda r: r.ttfa_max_s)
        print(
            f"  {key[0]}, {key[1]}: throughput {statistics.median(ratios):4.2f}x raw (median of"
            f" {', '.join(f'{x:.2f}' for x in ratios)}); first audio max {worst.ttfa_max_s:.2f} s"
            f" ({worst.ttfa_max_chunk_times:.1f} chunk-times); underruns"
            f" {sum(r.underruns for r in same)}, gaps {sum(r.gap_ms for r in same):.0f} ms"
        )


def print_runs(runs: list[PolicyRun]) -> None:
    scenario = ""
    for run in runs:
        if run.scenario != scenario:
            scenario = run.scenario
            print(f"  {scenario}:")
        print_run(run)


def print_raw(label: str, raw: RawLoop) -> None:
    print(
        f"{label}: {raw.audio_s:.1f} s of audio in {raw.gen_s:.1f} s, rtf {raw.rtf:.3f},"
        f" capacity {raw.capacity:.2f} audio s/s, {raw.chunks} chunks,"
        f" median chunk-time {raw.chunk_time_s:.2f} s, longest {raw.longest_chunk_s:.2f} s",
        flush=True,
    )


if __name__ == "__main__":
    main()
