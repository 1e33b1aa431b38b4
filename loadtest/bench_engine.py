"""Engine benchmark on the real Kokoro-82M weights: torch and ONNX Runtime side by side
(printed figures, not timed tests).

    python -m loadtest.bench_engine --model-dir ~/.cache/speechd/kokoro-82m [--device cpu]
        [--engines torch,onnx] [--graphs auto|float,fused,int8] [--threads N]
        [--voice af_heart] [--repeat 3] [--rounds 1] [--section N ...] [--details]

Each runtime runs in a child process of its own, one after the other (--rounds N: N times,
interleaved, each length's best kept), so its memory is what a worker's would be (an ONNX
Runtime worker never imports torch). Then it prints, per runtime
and with the ratio ONNX Runtime / torch:
  1. real-time factor per chunk length (compute seconds per audio second; median of
     --repeat seeded runs);
  2. first-chunk latency: a 60-word paragraph planned progressively (fed the runtime's own
     RTF), from the request to the first chunk's audio;
  3. where a chunk's time goes: each stage (front: text encoders and durations; noise;
     back: prosody and decoder; the engine's share: style, tokens, trim, word timing) fitted
     as a fixed price per call plus a price per second of audio, the silence decoded and then
     trimmed away, and the G2P time of a chunk's text (planning, outside synthesis);
  4. memory: the child's peak and final RSS, and whether torch was imported;
  5. the cost of word timings per chunk length, next to the chunk's synthesis time: finding
     the words' spans when planning, placing them from the predicted durations (inside
     `synthesize`, measured in place), and slicing them into the record's `w` header;
  6. quality against torch's float32 (run torch first: `--engines torch,onnx`), on the fixed
     texts and voices of `loadtest._quality`: chunks whose durations are torch's, the
     log-spectral distance (mean and largest; bounds 1.0 dB for float graphs, 2.5 dB for
     int8) and the recogniser's recall beside torch's (within 0.02).
--graphs runs ONNX Runtime once per decoder graph named (`--graph`: float, fused, int8, or
auto, the worker's own choice), each in its own child, so the rewrites' and int8's speed and
quality print side by side with the float graph's (ratios against it). torch runs first with
kokoro's own modules (`torch`, the float32 reference of section 6), then, where --graphs
names fused or auto, with its fused decoder (`torch:fused`, what a torch worker speaks with
by default).
--section N (repeatable) measures and prints only those sections (memory is read anyway).
With --details the first runtime also prints: time to first audio with progressive chunks
against one chunk per sentence, planning time for long texts, and plans for a share of the
device (as the worker makes them). Encoder cost is loadtest.bench_encoders' business.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Any

import msgspec

from speechd.casts import record_words
from speechd.engine import Engine, EngineConfig, load_engine, parse_device
from speechd.text import Chunk, ChunkPolicy
from speechd.worker import QUANTUM_S, ChunkTimes, plan_timing, warm_up

from ._listener import Listener
from ._stages import StageClock, Stages, fit_line

PARAGRAPH = (
    "The old lighthouse keeper climbed the narrow stairs every evening just before the sun "
    "slipped below the hills. He lit the great lamp and wound the brass clockwork that turned "
    "it through the night. Ships passing far out on the dark water never saw his face, but "
    "they trusted the steady beam to guide them home. In the morning he slept."
)
PROSE = [
    "On March 3rd, 2021, the council approved a budget of $4.2 million for the new library.",
    "Dr. Patel said the results, though preliminary, were better than anyone had expected.",
    "We left at 6:45 am, drove 120 km along the coast, and reached the harbor before noon.",
    "Nobody knew why the old clock in the hall had stopped at exactly a quarter past three.",
    "The committee will meet again next Tuesday; until then, please send comments by email.",
    "Rain fell steadily all afternoon, and the children watched it from the kitchen window.",
    "After 25 years of service, she retired to a small village in the north of Scotland.",
    "Is it possible that the answer was in front of us the whole time? Perhaps it was.",
    "The recipe calls for 2 cups of flour, 3 eggs, and a pinch of salt, mixed until smooth.",
    "In 1969, three astronauts flew to the Moon, and two of them walked on its surface.",
]
TARGETS = (16, 32, 64, 128, 256, 510)
WHOLE = ChunkPolicy(first_tokens=510, first_max_tokens=510, min_tokens=510, rtf=0)


@dataclass
class Run:
    ttfa_s: float
    stall_s: float
    chunks: int
    audio_s: float
    wall_s: float


def prose(chars: int) -> str:
    """Deterministic English prose of about `chars` characters, in paragraphs of 5 sentences."""
    out: list[str] = []
    size = i = 0
    while size < chars:
        sentence = PROSE[(i * 7) % len(PROSE)]
        out.append(sentence + ("\n\n" if i % 5 == 4 else " "))
        size += len(out[-1])
        i += 1
    return "".join(out)[:chars].rsplit(" ", 1)[0]


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def chunk_of(engine: Engine, voice: str, target: int) -> Chunk:
    """A chunk of about `target` tokens, cut by the planner from prose (so it ends where the
    planner would end it)."""
    policy = ChunkPolicy(
        first_tokens=min(target, 40),
        min_tokens=min(target, 8),
        sentence_tokens=target,
        max_tokens=target,
        rtf=0,
    )
    chunks = engine.plan(prose(12_000), voice, policy)[2:]
    return min(chunks, key=lambda c: (abs(c.tokens - target), c.index))


def play(engine: Engine, chunks: Sequence[Chunk], voice: str, started: float) -> Run:
    """Synthesize in order, played by a listener from the first audio on."""
    listener = Listener(submitted=started)
    for chunk in chunks:
        duration = engine.synthesize(chunk, voice, 1.0, seed=chunk.index).duration_s
        listener.receive(time.perf_counter(), duration)
    wall = time.perf_counter() - started
    return Run(listener.ttfa or 0.0, listener.stall_s, len(chunks), listener.received_s, wall)


def first_audio(engine: Engine, voice: str, rtf: float, repeat: int) -> None:
    words = len(PARAGRAPH.split())
    policy = ChunkPolicy().with_rtf(rtf)
    sentences = re.split(r"(?<=[.!?])\s+", PARAGRAPH)
    print(f"\n   Time to first audio, {words}-word paragraph ({len(sentences)} sentences)")
    progressive: list[Run] = []
    per_sentence: list[Run] = []
    for _ in range(repeat):  # interleaved, so both see the same machine
        started = time.perf_counter()
        chunks = engine.plan(PARAGRAPH, voice, policy)
        progressive.append(play(engine, chunks, voice, started))
        started = time.perf_counter()
        chunks = [
            Chunk(i, s, engine.plan(s, voice, WHOLE)[0].phonemes) for i, s in enumerate(sentences)
        ]
        per_sentence.append(play(engine, chunks, voice, started))
    plan = engine.plan(PARAGRAPH, voice, policy)
    print(f"   progressive plan at RTF {rtf:.2f}: " + " | ".join(c.text for c in plan))
    print(f"   {'strategy':<22} {'first audio s':>13} {'stalls s':>9} {'chunks':>7} {'audio s':>8}")
    for name, runs in (("progressive", progressive), ("one chunk per sentence", per_sentence)):
        print(
            f"   {name:<22} {statistics.median(r.ttfa_s for r in runs):>13.2f} "
            f"{statistics.median(r.stall_s for r in runs):>9.2f} {runs[0].chunks:>7} "
            f"{statistics.median(r.audio_s for r in runs):>8.2f}"
        )
    print(
        "   per run, progressive first audio / stalls: "
        + ", ".join(f"{r.ttfa_s:.2f}/{r.stall_s:.2f}" for r in progressive)
    )
    ratios = [p.ttfa_s / s.ttfa_s for p, s in zip(progressive, per_sentence, strict=True)]
    print(
        f"   first-audio ratio progressive / per-sentence: median {statistics.median(ratios):.2f}"
        f" (runs: {', '.join(f'{r:.2f}' for r in ratios)}; target <= 0.35)"
    )


def planning(engine: Engine, voice: str) -> None:
    print("\n   Planning time (normalise + G2P + chunking)")
    for chars in (4096, 200_000):
        text = prose(chars)
        started = time.perf_counter()
        first = next(engine.iter_plan(text, voice))
        to_first = time.perf_counter() - started
        started = time.perf_counter()
        chunks = engine.plan(text, voice)
        total = time.perf_counter() - started
        print(
            f"   {len(text):>7} chars: {total:6.2f} s for {len(chunks)} chunks "
            f"({len(text) / total / 1000:.0f}k chars/s); first chunk after {to_first:.2f} s "
            f"({first.tokens} tokens)"
        )


def shared_plans(engine: Engine, voice: str) -> None:
    times = ChunkTimes()
    warm_up(engine, ChunkPolicy(), voice, times)
    overhead, slope = times.line
    print(
        f"\n   Plans for a share of the device (measured: {overhead:.2f} s + {slope:.3f} s per"
        f" audio second a chunk; quantum {QUANTUM_S} s)"
    )
    text = prose(4096)
    print(f"   {'share':>5} {'chunks':>6} {'device s':>8} {'stalls s':>8} {'longest alone s':>15}")
    for share in (1.0, 1.25, 1.5, 1.75, 2.0, 2.5):
        policy = plan_timing(times, share=share, quantum_s=QUANTUM_S).apply(ChunkPolicy())
        audio = [policy.audio_s(c.tokens) for c in engine.plan(text, voice, policy)]
        alone = [overhead + slope * a for a in audio]
        listener = Listener(submitted=0.0)
        for made, ready in zip(audio, accumulate(share * t for t in alone), strict=True):
            listener.receive(ready, made)
        print(
            f"   {share:>5.2f} {len(audio):>6} {sum(alone):>8.1f} {listener.stall_s:>8.1f}"
            f" {max(alone):>15.2f}"
        )


class _Stopwatch:
    """Wraps a module's function so each call's time is recorded (the real call, in place)."""

    def __init__(self, module: object, name: str) -> None:
        self.module, self.name = module, name
        self.original = getattr(module, name)
        self.calls: list[float] = []

    def __enter__(self) -> _Stopwatch:
        def timed_call(*args: object, **kwargs: object) -> object:
            started = time.perf_counter()
            try:
                return self.original(*args, **kwargs)
            finally:
                self.calls.append(time.perf_counter() - started)

        setattr(self.module, self.name, timed_call)
        return self

    def __exit__(self, *exc: object) -> None:
        setattr(self.module, self.name, self.original)


def timing_cost(engine: Engine, voice: str, repeat: int) -> list[dict[str, float]]:
    """Section 5 on one runtime: per chunk length, the word timing's three costs (planning's
    spans, the timings inside `synthesize`, the record's `w` header) and their share of the
    chunk's synthesis time."""
    from speechd.engine import _engine
    from speechd.text import _chunks

    rows: list[dict[str, float]] = []
    for target in TARGETS:
        with _Stopwatch(_chunks, "word_spans") as spans:
            chunk = chunk_of(engine, voice, target)
        span_s = statistics.median(spans.calls)  # per chunk of the plan the chunk came from
        synth: list[float] = []
        with _Stopwatch(_engine, "word_timings") as timings:
            for seed in range(repeat):
                started = time.perf_counter()
                synthesis = engine.synthesize(chunk, voice, 1.0, seed=seed)
                synth.append(time.perf_counter() - started)
        started = time.perf_counter()
        for _ in range(100):
            words = record_words(
                synthesis.words, 0, len(synthesis.pcm), 10**9, engine.sample_rate, final=True
            )
            msgspec.json.encode(words)
        record_s = (time.perf_counter() - started) / 100
        timing_s = statistics.median(timings.calls)
        cost = span_s + timing_s + record_s
        rows.append(
            {
                "tokens": chunk.tokens,
                "words": len(synthesis.words),
                "synth_s": statistics.median(synth),
                "spans_s": span_s,
                "timing_s": timing_s,
                "record_s": record_s,
                "share": 100 * cost / statistics.median(synth),
            }
        )
    return rows


def print_timing_cost(results: list[dict[str, Any]]) -> None:
    print("\n5. Word timing cost per chunk (target: under 1% of the chunk's synthesis time)")
    print(
        f"   {'runtime':<7} {'tokens':>6} {'words':>5} {'synth s':>8} {'spans us':>8} "
        f"{'timing us':>9} {'record us':>9} {'share %':>8}"
    )
    worst = 0.0
    for r in results:
        for row in r["timing"]:
            worst = max(worst, row["share"])
            print(
                f"   {r['runtime']:<7} {row['tokens']:>6} {row['words']:>5} "
                f"{row['synth_s']:>8.2f} {row['spans_s'] * 1e6:>8.0f} "
                f"{row['timing_s'] * 1e6:>9.0f} {row['record_s'] * 1e6:>9.0f} "
                f"{row['share']:>8.3f}"
            )
    print(f"   largest share: {worst:.3f}% of the synthesis time (target < 1%)")


@dataclass
class Point:
    """One chunk length on one runtime: medians of the seeded runs."""

    tokens: int
    audio_s: float
    gen_s: float
    best_s: float
    g2p_s: float


def _sections(args: argparse.Namespace) -> set[int]:
    return set(args.section or range(1, 7))


def _rss_mib() -> dict[str, float]:
    out: dict[str, float] = {}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmHWM", "VmRSS"):
                out[name] = int(value.split()[0]) / 1024
    return out


def child(args: argparse.Namespace) -> dict[str, Any]:
    """Measure one runtime in this process; details printed, figures returned."""
    started = time.perf_counter()
    engine = load_engine(
        EngineConfig(
            model_dir=args.model_dir,
            device=args.device,
            threads=args.threads,
            engine=args.child,
            graph=args.child_graph,
        )
    )
    loaded = time.perf_counter() - started
    warm = timed(engine.warm_up)
    after_load = _rss_mib()
    sections = _sections(args)
    clock = StageClock()
    points: list[Point] = []
    runs: list[Stages] = []
    measured_lengths = bool(sections & {1, 3}) or (2 in sections and not args.rtf)
    with clock.installed():
        for target in TARGETS if measured_lengths else ():
            chunk = chunk_of(engine, args.voice, target)
            measured = [
                clock.measure(engine, chunk, args.voice, seed) for seed in range(args.repeat)
            ]
            runs += measured
            g2p = [timed(lambda c=chunk: engine.plan(c.text, args.voice, WHOLE)) for _ in range(3)]
            points.append(
                Point(
                    chunk.tokens,
                    statistics.median(r.kept_s for r in measured),
                    statistics.median(r.total_s for r in measured),
                    min(r.total_s for r in measured),
                    statistics.median(g2p),
                )
            )
    # The planner's RTF: best of the runs for chunks up to 128 tokens (robust to a neighbour).
    short = [p.best_s / p.audio_s for p in points if p.tokens <= 160]
    rtf = statistics.median(short) if short else args.rtf or 0.0
    policy = ChunkPolicy().with_rtf(args.rtf or rtf)
    first: list[float] = []
    for _ in range(max(args.repeat, 3) if 2 in sections else 0):
        began = time.perf_counter()
        chunk = next(iter(engine.iter_plan(PARAGRAPH, args.voice, policy)))
        engine.synthesize(chunk, args.voice, 1.0, seed=0)
        first.append(time.perf_counter() - began)
    kept = [r.kept_s for r in runs]
    made = [r.made_s for r in runs]
    fitted = len(runs) > 1
    stages = {
        name: fit_line(kept, [getattr(r, f"{name}_s") for r in runs]) if fitted else (0.0, 0.0)
        for name in ("total", "front", "noise", "back", "engine")
    }
    timing = timing_cost(engine, args.voice, args.repeat) if 5 in sections else []
    if args.details:
        print(f"\n[{engine.runtime}] details")
        first_audio(engine, args.voice, args.rtf or rtf, max(args.repeat, 5))
        planning(engine, args.voice)
        shared_plans(engine, args.voice)
    return {
        "runtime": f"{engine.runtime}:{engine.graph}" if engine.graph else engine.runtime,
        "quality": _quality(engine, args) if 6 in sections else None,
        "detail": engine.detail,
        "device": engine.device,
        "load_s": loaded,
        "warm_s": warm,
        "points": [vars(p) for p in points],
        "rtf": rtf,
        "first_chunk_s": statistics.median(first) if first else 0.0,
        "first_chunk_runs": first,
        "stages": stages,
        "back_per_made_s": fit_line(made, [r.back_s for r in runs]) if fitted else (0.0, 0.0),
        "trimmed_s": statistics.fmean(m - k for m, k in zip(made, kept, strict=True))
        if runs
        else 0.0,
        "timing": timing,
        "rss_after_load": after_load,
        "rss": _rss_mib(),
        "torch_imported": "torch" in sys.modules,
    }


def _quality(engine: Engine, args: argparse.Namespace) -> dict[str, Any] | None:
    """Section 6 in a child: torch writes its renderings of the quality set for the others;
    every other runtime compares its own with them (None: no torch reference yet)."""
    from . import _quality as quality

    rendered = quality.render(engine)
    path = Path(args.reference)
    if engine.runtime == "torch" and engine.graph == "float":
        quality.save(rendered, path)
        return None
    if not path.is_file():
        return None
    got = quality.compare(rendered, quality.load(path))
    return {
        "same_durations": got.same_durations,
        "chunks": got.chunks,
        "mean_db": got.mean_db,
        "max_db": got.max_db,
        "recall": got.recall,
        "reference_recall": got.reference_recall,
    }


def _run_child(
    runtime: str, args: argparse.Namespace, details: bool, graph: str = "auto"
) -> dict[str, Any]:
    argv = [sys.executable, "-m", "loadtest.bench_engine", "--child", runtime]
    argv += ["--child-graph", graph, "--reference", args.reference]
    argv += ["--model-dir", args.model_dir, "--device", args.device, "--voice", args.voice]
    argv += ["--repeat", str(args.repeat)]
    argv += ["--threads", str(args.threads)] if args.threads else []
    argv += ["--rtf", str(args.rtf)] if args.rtf else []
    argv += ["--details"] if details else []
    argv += [f"--section={n}" for n in sorted(args.section or ())]
    label = f"{runtime}:{graph}" if runtime == "onnx" or graph != "float" else runtime
    print(f"{label}: measuring in a child process ...", flush=True)
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


def _best(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Of several rounds of one runtime: the fastest round's figures, with each chunk length's
    time the least of the rounds' (robust to a neighbour's burst on a shared machine)."""
    best = dict(min(rounds, key=lambda r: sum(p["gen_s"] for p in r["points"])))
    best["points"] = [
        dict(p, gen_s=min(r["points"][i]["gen_s"] for r in rounds))
        for i, p in enumerate(best["points"])
    ]
    best["rounds"] = len(rounds)
    return best


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def report(results: list[dict[str, Any]], sections: set[int]) -> None:
    print("\n   " + "\n   ".join(f"{r['runtime']}: {r['detail']}" for r in results))
    print(
        "   load / warm-up s: "
        + ", ".join(f"{r['runtime']} {r['load_s']:.1f} / {r['warm_s']:.1f}" for r in results)
    )
    if 1 in sections:
        rtf_report(results)
    if 2 in sections:
        print("\n2. First-chunk latency, 60-word paragraph, progressive plan at the runtime's RTF")
        for r in results:
            runs = ", ".join(f"{x:.2f}" for x in r["first_chunk_runs"])
            fed = f"RTF fed {r['rtf']:.2f}"
            print(f"   {r['runtime']:<6} {r['first_chunk_s']:6.2f} s (runs: {runs}; {fed})")
    if 3 in sections:
        stages_report(results)
    if 4 in sections:
        print("\n4. Memory of the process (one runtime each)")
        for r in results:
            print(
                f"   {r['runtime']:<6} peak {r['rss']['VmHWM']:6.0f} MiB, after load "
                f"{r['rss_after_load']['VmRSS']:6.0f} MiB, at the end "
                f"{r['rss']['VmRSS']:6.0f} MiB; "
                f"torch imported: {'yes' if r['torch_imported'] else 'no'}"
            )
    if 5 in sections:
        print_timing_cost(results)
    if 6 in sections:
        quality_report(results)


def quality_report(results: list[dict[str, Any]]) -> None:
    print(
        "\n6. Quality against torch's float32 (fixed texts and voices; bounds: durations "
        "identical, <= 1.0 dB float, <= 2.5 dB int8, recall within 0.02)"
    )
    print(
        f"   {'runtime':<12} {'same durations':>14} {'mean dB':>8} {'max dB':>7} "
        f"{'recall':>7} {'torch recall':>12}"
    )
    for r in results:
        q = r.get("quality")
        if q is None:
            note = "the reference" if r["runtime"] in ("torch", "torch:float") else "no reference"
            print(f"   {r['runtime']:<12} {note}")
            continue
        print(
            f"   {r['runtime']:<12} {q['same_durations']:>7} of {q['chunks']:<4} "
            f"{q['mean_db']:>8.2f} {q['max_db']:>7.2f} {q['recall']:>7.2f} "
            f"{q['reference_recall']:>12.2f}"
        )


def rtf_report(results: list[dict[str, Any]]) -> None:
    names = [r["runtime"] for r in results]
    base = results[0]
    rounds = base.get("rounds", 1)
    print(
        "\n1. Real-time factor per chunk length (compute s / audio s, median of the runs"
        + (f", best of {rounds} rounds)" if rounds > 1 else ")")
    )
    head = f"   {'tokens':>6} {'audio s':>8}"
    for name in names:
        head += f" {name + ' s':>9} {name + ' rtf':>10}"
    if len(results) > 1:
        head += f" {names[-1] + '/' + names[0]:>11}"
    print(head)
    for i, point in enumerate(base["points"]):
        line = f"   {point['tokens']:>6} {point['audio_s']:>8.2f}"
        rtfs = []
        for r in results:
            p = r["points"][i]
            rtfs.append(p["gen_s"] / p["audio_s"])
            line += f" {p['gen_s']:>9.2f} {rtfs[-1]:>10.2f}"
        if len(results) > 1:
            line += f" {_ratio(rtfs[-1], rtfs[0]):>11}"
        print(line)
    overall = {
        r["runtime"]: sum(p["gen_s"] for p in r["points"]) / sum(p["audio_s"] for p in r["points"])
        for r in results
    }
    line = "   all lengths: " + ", ".join(f"{n} rtf {overall[n]:.2f}" for n in names)
    if len(results) > 1:
        ratio = _ratio(overall[names[-1]], overall[names[0]])
        line += f"; {names[-1]} / {names[0]} {ratio} (target <= 0.80x)"
    print(line)
    if "onnx:float" in overall and len([n for n in names if n.startswith("onnx:")]) > 1:
        base_rtf = overall["onnx:float"]
        print(
            "   against the float graph (compute per audio second): "
            + ", ".join(
                f"{n} {_ratio(overall[n], base_rtf)}"
                for n in names
                if n.startswith("onnx:") and n != "onnx:float"
            )
        )


def stages_report(results: list[dict[str, Any]]) -> None:
    names = [r["runtime"] for r in results]
    print("\n3. Where a chunk's time goes: fixed s per call + s per audio second (least squares)")
    print(f"   {'stage':<34}" + "".join(f" {n:>18}" for n in names))
    labels = {
        "front": "front (text encoders, durations)",
        "noise": "decoder noise drawn (host)",
        "back": "back (prosody, decoder)",
        "engine": "engine (style, tokens, trim, timing)",
        "total": "synthesize, in all",
    }
    for key, label in labels.items():
        cells = "".join(
            f" {r['stages'][key][0]:>7.3f} + {r['stages'][key][1]:>6.3f}/s" for r in results
        )
        print(f"   {label:<34}{cells}")
    cells = "".join(
        f" {r['trimmed_s']:>6.2f} s ({r['trimmed_s'] * r['back_per_made_s'][1]:>5.2f} s)"
        for r in results
    )
    print(f"   {'decoded, then trimmed (its cost)':<34}{cells}")
    g2p = "".join(
        f" {statistics.median(p['g2p_s'] for p in r['points']):>15.3f} s" for r in results
    )
    print(f"   {'G2P of a chunk (planning)':<34}{g2p}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument(
        "--device", default="cpu", type=parse_device, help="auto, cpu, cuda or cuda:N (cpu)"
    )
    parser.add_argument("--engines", default="torch,onnx", help="runtimes, in order (torch,onnx)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--voice", default="af_heart")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--rounds", type=int, default=1, help="children per runtime, interleaved; best kept"
    )
    parser.add_argument("--rtf", type=float, default=None, help="feed this RTF to the planner")
    parser.add_argument(
        "--section", type=int, action="append", choices=range(1, 7), help="only these (1-6)"
    )
    parser.add_argument(
        "--graphs",
        default="auto",
        help="ONNX Runtime's decoder graphs, one child each: auto, or some of float,fused,int8",
    )
    parser.add_argument("--child-graph", default="auto", help=argparse.SUPPRESS)
    parser.add_argument("--reference", default="", help=argparse.SUPPRESS)
    parser.add_argument("--details", action="store_true", help="the first runtime's details")
    parser.add_argument("--child", choices=["torch", "onnx"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(_RESULT + json.dumps(child(args)), flush=True)
        return
    before = os.getloadavg()[0]
    print(
        f"speechd engine benchmark: {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, device {args.device}, voice {args.voice}, "
        f"threads {args.threads or 'default'}, load average {before:.1f}"
    )
    graphs = [g.strip() for g in args.graphs.split(",") if g.strip()]
    # torch speaks first with kokoro's own modules (`float`): the reference section 6 holds
    # every other decoder to; its fused decoder (what `--graph auto` gives a torch worker)
    # runs as a child of its own where the graphs asked for include it.
    torch_graphs = ["float"] + (["fused"] if {"auto", "fused"} & set(graphs) else [])
    runs = [
        (e.strip(), g)
        for e in args.engines.split(",")
        if e.strip()
        for g in (graphs if e.strip() == "onnx" else torch_graphs)
    ]
    rounds: dict[tuple[str, str], list[dict[str, Any]]] = {run: [] for run in runs}
    with tempfile.TemporaryDirectory(prefix="speechd-bench-") as scratch:
        args.reference = str(Path(scratch) / "torch-reference.npz")
        for n in range(args.rounds):  # interleaved: every runtime sees the neighbours' spells
            for i, (name, graph) in enumerate(runs):
                details = args.details and i == 0 and n == 0
                rounds[(name, graph)].append(_run_child(name, args, details, graph))
    report([_best(rounds[run]) for run in runs], _sections(args))
    print(f"\n   load average before {before:.1f}, at the end {os.getloadavg()[0]:.1f}")


_RESULT = "BENCH-RESULT "

if __name__ == "__main__":
    main()
