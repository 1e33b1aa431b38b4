"""Batched synthesis on the real Kokoro-82M weights: the cost per item against the batch size,
for each runtime (printed figures, not timed tests).

    python -m loadtest.bench_batch --model-dir ~/.cache/speechd/kokoro-82m [--device cpu]
        [--engines torch,onnx] [--threads N] [--sizes 1,2,4,8] [--tokens 150] [--repeat 3]
        [--rounds 1] [--voice af_heart]

Each runtime runs in a child process of its own (as a worker would), one after the other
(--rounds N: N times, interleaved, each size's best kept). In it: one chunk of about
--tokens phonemes (150: ~7.5 s of speech, issue 31's measurement), rendered
`Engine.synthesize_batch` at each batch size, every item the same chunk with its own seed
(equal lengths: no padding), --repeat times; batch 1 is `Engine.synthesize` itself, measured
in the same run. Printed per runtime: the pass's time (best, median), the cost per item, that
cost against batch 1's (below 1: batching saves), and the real-time factor per item; then
what the worker's warm-up measurement (`measure_batch_costs`, its default budget) gives and
the size `--max-batch auto` would keep from it (`choose_max_batch`). The load average is
printed before and after: figures taken beside other work are void.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from speechd.engine import (
    BatchItem,
    Engine,
    EngineConfig,
    choose_max_batch,
    load_engine,
    measure_batch_costs,
    parse_device,
)
from speechd.text import Chunk, ChunkPolicy

TEXT = (
    "The old lighthouse keeper climbed the narrow stairs every evening just before the sun "
    "slipped below the hills and lit the great lamp that turned through the night while ships "
    "passed far out on the dark water and trusted the steady beam to guide them home again."
)
#: One chunk of the text, however long (no cut below the model's limit).
WHOLE = ChunkPolicy(first_tokens=510, first_max_tokens=510, min_tokens=510, rtf=0)
_RESULT = "BENCH-RESULT "


def probe_chunk(engine: Engine, voice: str, tokens: int) -> Chunk:
    """One planned chunk of TEXT cut to about `tokens` phonemes (at a word boundary)."""
    (chunk,) = engine.plan(TEXT, voice, WHOLE)[:1]
    phonemes = chunk.phonemes
    if tokens < len(phonemes):
        space = phonemes.find(" ", tokens)
        phonemes = phonemes if space < 0 else phonemes[:space]
    return Chunk(0, "bench_batch probe", phonemes)


def measure_sizes(
    engine: Engine, chunk: Chunk, voice: str, sizes: Sequence[int], repeat: int
) -> list[dict[str, float]]:
    """Per batch size: the pass's times (best, median of `repeat`), per item, audio per item."""
    engine.synthesize(chunk, voice, 1.0, seed=0)  # first-call costs out of the figures
    rows = []
    for size in sizes:
        items = [BatchItem(chunk, voice, 1.0, seed) for seed in range(size)]
        times, audio = [], 0.0
        for _ in range(repeat):
            began = time.perf_counter()
            if size == 1:  # the batch-1 path the worker takes today
                audio = engine.synthesize(chunk, voice, 1.0, seed=0).duration_s
            else:
                results = engine.synthesize_batch(items, isolate=False)
                audio = min(r.duration_s for r in results if not isinstance(r, Exception))
            times.append(time.perf_counter() - began)
        rows.append(
            {
                "size": size,
                "best_s": min(times),
                "median_s": statistics.median(times),
                "audio_s": audio,
            }
        )
    return rows


def measure(
    engine: Engine, voice: str, tokens: int, sizes: Sequence[int], repeat: int
) -> dict[str, Any]:
    """One runtime's figures (as `report` prints them): `measure_sizes` on a chunk of about
    `tokens` phonemes, then the worker's own warm-up measurement and what `auto` keeps."""
    chunk = probe_chunk(engine, voice, tokens)
    rows = measure_sizes(engine, chunk, voice, [n for n in sizes if n <= engine.max_batch], repeat)
    costs = measure_batch_costs(engine)
    return {
        "runtime": engine.runtime,
        "detail": engine.detail,
        "max_batch": engine.max_batch,
        "tokens": len(chunk.phonemes),
        "rows": rows,
        "warm_up_costs": {str(n): c for n, c in costs.items()},
        "auto": choose_max_batch(costs),
    }


def child(args: argparse.Namespace) -> dict[str, Any]:
    engine = load_engine(
        EngineConfig(
            model_dir=args.model_dir, device=args.device, threads=args.threads, engine=args.child
        )
    )
    return measure(engine, args.voice, args.tokens, args.sizes, args.repeat)


def report(result: dict[str, Any]) -> list[str]:
    """The printed lines of one runtime's figures."""
    rows = result["rows"]
    base = next((r["best_s"] for r in rows if r["size"] == 1), None)
    lines = [
        f"\n[{result['runtime']}] {result['detail']}; a chunk of {result['tokens']} phonemes "
        f"({rows[0]['audio_s']:.2f} s of audio) per item; most per pass {result['max_batch']}",
        f"   {'batch':>5} {'pass best s':>11} {'median s':>9} {'per item s':>11} "
        f"{'x batch 1':>9} {'rtf/item':>9}",
    ]
    for row in rows:
        per_item = row["best_s"] / row["size"]
        ratio = f"{per_item / base:9.2f}" if base else f"{'n/a':>9}"
        lines.append(
            f"   {row['size']:5d} {row['best_s']:11.3f} {row['median_s']:9.3f} "
            f"{per_item:11.3f} {ratio} {per_item / row['audio_s']:9.3f}"
        )
    warm = ", ".join(f"{n}: {c * 1000:.0f} ms" for n, c in result["warm_up_costs"].items())
    lines.append(f"   warm-up measurement (measure_batch_costs, per item): {warm}")
    lines.append(f"   --max-batch auto would keep: {result['auto']}")
    return lines


def _best(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Of several rounds of one runtime: each size's least times."""
    best = dict(rounds[0])
    best["rows"] = [
        dict(
            row,
            best_s=min(r["rows"][i]["best_s"] for r in rounds),
            median_s=min(r["rows"][i]["median_s"] for r in rounds),
        )
        for i, row in enumerate(rounds[0]["rows"])
    ]
    return best


def _run_child(runtime: str, args: argparse.Namespace) -> dict[str, Any]:
    argv = [sys.executable, "-m", "loadtest.bench_batch", "--child", runtime]
    argv += ["--model-dir", args.model_dir, "--device", args.device, "--voice", args.voice]
    argv += ["--repeat", str(args.repeat), "--tokens", str(args.tokens)]
    argv += ["--sizes", ",".join(map(str, args.sizes))]
    argv += ["--threads", str(args.threads)] if args.threads else []
    print(f"{runtime}: measuring in a child process ...", flush=True)
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    result: dict[str, Any] | None = None
    for line in process.stdout:
        if line.startswith(_RESULT):
            result = json.loads(line[len(_RESULT) :])
        else:
            print(line, end="", flush=True)
    if process.wait() != 0 or result is None:
        raise SystemExit(f"{runtime}: the benchmark child failed (exit {process.returncode})")
    return result


def _sizes(text: str) -> list[int]:
    sizes = sorted({int(n) for n in text.split(",") if n.strip()} | {1})
    if sizes[0] < 1:
        raise argparse.ArgumentTypeError("batch sizes are 1 or more")
    return sizes


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument(
        "--device", default="cpu", type=parse_device, help="auto, cpu, cuda or cuda:N (cpu)"
    )
    parser.add_argument("--engines", default="torch,onnx", help="runtimes, in order (torch,onnx)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--voice", default="af_heart")
    parser.add_argument("--sizes", type=_sizes, default=[1, 2, 4, 8], help="1,2,4,8")
    parser.add_argument("--tokens", type=int, default=150, help="phonemes per item (150)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--rounds", type=int, default=1, help="children per runtime, interleaved; best kept"
    )
    parser.add_argument("--child", choices=["torch", "onnx"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(_RESULT + json.dumps(child(args)), flush=True)
        return
    before = os.getloadavg()
    print(
        f"speechd batch benchmark: {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, device {args.device}, threads {args.threads or 'default'}, "
        f"sizes {args.sizes}, load average {before[0]:.2f} {before[1]:.2f} {before[2]:.2f}"
    )
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    rounds: dict[str, list[dict[str, Any]]] = {e: [] for e in engines}
    for _ in range(args.rounds):
        for name in engines:
            rounds[name].append(_run_child(name, args))
    for name in engines:
        for line in report(_best(rounds[name])):
            print(line)
    after = os.getloadavg()
    print(
        f"\n   load average before {before[0]:.2f} {before[1]:.2f} {before[2]:.2f}, "
        f"after {after[0]:.2f} {after[1]:.2f} {after[2]:.2f}"
    )


if __name__ == "__main__":
    main()
