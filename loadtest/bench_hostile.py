"""Hostile input benchmark (printed figures, not timed tests).

    python -m loadtest.bench_hostile [--section planning] [--n 50000] [--pattern '1-' ...]
    python -m loadtest.bench_hostile --section first-audio --model-dir ~/.cache/speechd/kokoro-82m
        [--device cpu] [--threads N] [--url http://127.0.0.1:8000] [--repeat 3]
    python -m loadtest.bench_hostile --section api [--url http://127.0.0.1:8000]
    python -m loadtest.bench_hostile --section ssml [--n 50000]
    python -m loadtest.bench_hostile --section words-load --model-dir ~/.cache/speechd/kokoro-82m
    python -m loadtest.bench_hostile --section whole-rss [--mib 50] [--hold 20]
    python -m loadtest.bench_hostile --section pauses --model-dir ~/.cache/speechd/kokoro-82m
        [--device cpu] [--threads N] [--pause-s S]

Sections (`--section`, repeatable; default: every section listed here):

  planning   for each adversarial pattern (runs of each character the normaliser reads,
             and mixes that used to backtrack), the time to normalise and plan it with the
             real English G2P (no model needed) at n and 2n characters and their ratio
             (target: <= 2.5, linear), the longest single planner step (what one call may
             hold the engine thread for) and the cost per character against ordinary prose
             planned in the same run.

  first-audio  on the real model, under `speechd serve` (started here, a fresh one per
             condition, or `--url`): an ordinary request's time to first audio
             (`/v1/audio/speech`, pcm) alone, then right after a 200,000-character cast of
             ordinary prose was submitted, then right after a 200,000-character hostile cast
             (runs of `[`, `1-`, `a@`, `[a](`), `--repeat` times each, and the ratios of the
             medians: hostile / alone (target: <= 1.5) and hostile / prose (what the text's
             shape costs beyond sharing the device with a long cast). The worker plans the
             long cast a bounded slice at a time between chunk renders, so planning holds
             the ordinary request up by at most about one quantum. Whether the ordinary cast
             is admitted beside a long one at once is the admission policy's call: where the
             device cannot serve both listeners in real time without a stall, it waits until
             the long cast is far enough ahead, which the prose row shows.

  api        each kind of pathological request (the 20,000-character voice, JSON nested a
             million deep, 200,000 characters of hostile text, 8 KiB headers, ...) sent to a
             speechd of its own on the cost model (or only the kinds that make no cast, to
             `--url`), and how long the api takes to answer it and the slowest `/healthz`
             meanwhile (target: <= 100 ms); `loadtest._hostile_api` does the work.

  ssml       SSML (issue 29): the api's check of each SSML pattern (10,000-deep nesting,
             200,000 characters of tags, a huge attribute, entities, ...) at 100,000 and
             200,000 characters (targets: every check <= 100 ms, doubling ratio <= 2.5),
             planning the documents that pass it (ratio <= 2.5), and the planning cost of an
             SSML document against the same text plain (target <= 1.5x);
             `loadtest._hostile_ssml` does the work. The api section sends the SSML kinds too.

  words-load, whole-rss  the read path under hostile readers (`loadtest._hostile_reads`):
             an ordinary request's first audio alone, beside 60 clients asking `/healthz`
             (the control) and beside 60 asking `/words` of a long generating cast (target
             <= 1.2x alone); the api's RSS while 64 clients read a big finished file slowly
             with `stream: false` (target: under 300 MB).

  pauses     SSML breaks (issue 36, items 1-2), on the real model (`loadtest._hostile_pauses`):
             the largest pause document each door accepts (`/v1/audio/speech`, Wyoming,
             `/v1/casts`), the worker's peak RSS while making it against its RSS before
             (target: under 1.2x), and the cost model's rtf before and after them (target:
             within 10%). `--pause-s` caps each document's pause for a quick run.

A section is a function taking the parsed arguments; add it to SECTIONS.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from speechd.text import ChunkPolicy, Planner, PlanStatus

#: Runs of each character the normaliser handles, nested brackets, mixes, no spaces at all.
PATTERNS = [
    "[", "(", "1-", "a@", "http://", "*", "_", "#", "<", ".", "1", "-", "`", "~", "&#",
    "![", "[a](", "[[((<<", "[](", "<a ", "**a ", "_a ", "a.", "1.", "a-", "a.b@", "www.",
    "[[((<<**__``", "# a\n", "a,\n", "\u0301\u0316", "1 pm ", "Jan. ", "[a] ", "a",
]  # fmt: skip
PROSE = (
    "The old lighthouse keeper climbed the narrow stairs every evening just before the sun "
    "slipped below the hills. He lit the great lamp, and wound the brass clockwork that "
    "turned it through the night; ships never saw his face. "
)


@dataclass
class Run:
    seconds: float
    longest_step: float
    chunks: int


def plan(g2p: object, text: str) -> Run:
    """Normalise and plan `text` to its end, a step at a time, timing each step."""
    planner = Planner(g2p, ChunkPolicy(rtf=0), text=text, done=True)  # type: ignore[arg-type]
    longest = 0.0
    chunks = 0
    started = time.perf_counter()
    while True:
        before = time.perf_counter()
        step = planner.step()
        longest = max(longest, time.perf_counter() - before)
        if step.status is PlanStatus.CHUNK:
            chunks += 1
        elif step.status is PlanStatus.DONE:
            return Run(time.perf_counter() - started, longest, chunks)


def repeat(pattern: str, n: int) -> str:
    return (pattern * (n // len(pattern) + 1))[:n]


def planning(args: argparse.Namespace) -> None:
    # The planner's own G2P, without loading the model (misaki and spaCy are what it runs).
    from speechd.text import build_g2p

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        started = time.perf_counter()
        g2p = build_g2p("a")
    built = time.perf_counter() - started
    n = args.n
    print(f"\nplanning: normalise + plan to the end (English G2P built in {built:.1f} s)")
    plan(g2p, PROSE)  # warm
    prose = plan(g2p, repeat(PROSE, 2 * n))
    per_char = prose.seconds / (2 * n)
    print(
        f"   baseline prose at {2 * n:,} chars: {prose.seconds:.2f} s,"
        f" {per_char * 1e6:.1f} us/char, longest step {prose.longest_step * 1000:.1f} ms"
    )
    header = (
        f"   {'pattern':<16} {'n=' + format(n, ','):>10} {'2n':>10} {'ratio':>6}"
        f" {'longest step':>13} {'us/char':>8} {'x prose':>8} {'chunks':>7}"
    )
    print(header)
    worst_ratio = worst_step = 0.0
    for pattern in args.pattern or PATTERNS:
        small = plan(g2p, repeat(pattern, n))
        large = plan(g2p, repeat(pattern, 2 * n))
        ratio = large.seconds / max(small.seconds, 1e-9)
        step = max(small.longest_step, large.longest_step)
        cost = large.seconds / (2 * n)
        worst_ratio, worst_step = max(worst_ratio, ratio), max(worst_step, step)
        print(
            f"   {pattern!r:<16} {small.seconds:9.2f}s {large.seconds:9.2f}s {ratio:6.2f}"
            f" {step * 1000:10.1f} ms {cost * 1e6:8.1f} {cost / per_char:8.1f} {large.chunks:7}",
            flush=True,
        )
    print(
        f"   worst doubling ratio {worst_ratio:.2f} (target <= 2.5),"
        f" longest single step {worst_step * 1000:.1f} ms"
    )


ORDINARY = "Hello there. This is an ordinary request, {n}, asking for a short answer."


def hostile_text(n: int = 200_000) -> str:
    block = "[" * 4000 + "1-" * 3000 + "a@" * 3000 + "[a](" * 500
    return (block * (n // len(block) + 1))[:n]


async def _ttfa(client: Any, url: str, text: str) -> float:
    """Seconds from the request to its first audio byte (the rest is read to the end)."""
    body = {"voice": "af_heart", "input": text, "response_format": "pcm"}
    began = time.monotonic()
    first: float | None = None
    async with client.stream("POST", url + "/v1/audio/speech", json=body) as response:
        response.raise_for_status()
        async for piece in response.aiter_raw():
            if piece and first is None:
                first = time.monotonic() - began
    if first is None:
        raise RuntimeError("no audio")
    return first


async def _beside(url: str, repeat: int, long_text: str | None, label: str) -> list[float]:
    """An ordinary request's first audio, `repeat` times, after `long_text` (if any) was
    submitted as a cast; prints the runs (and the long cast's progress meanwhile)."""
    import httpx

    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=900.0)) as client:
        await _ttfa(client, url, "Warming up.")
        made = None
        if long_text is not None:
            made = await client.post(
                url + "/v1/casts", json={"input": long_text, "voice": "af_heart"}
            )
            made.raise_for_status()
        runs = [await _ttfa(client, url, ORDINARY.format(n=f"{label} {i}")) for i in range(repeat)]
        print(f"   {label:<26} " + "  ".join(f"{r:6.2f} s" for r in runs))
        if made is not None:
            status = (await client.get(f"{url}/v1/casts/{made.json()['id']}")).json()
            progress = status["progress"]
            print(
                f"   {'':<26} (the long cast meanwhile: {status['status']},"
                f" {progress['chunks_done']} chunks, {progress['audio_seconds']:.1f} s of audio)"
            )
    return runs


def first_audio(args: argparse.Namespace) -> None:
    import asyncio
    import statistics
    import tempfile
    from pathlib import Path

    from ._servers import speechd_at

    print("\nfirst-audio: an ordinary request alone, beside a 200,000-character cast of prose,")
    print("   and beside a 200,000-character hostile cast (a fresh server for each long cast)")
    conditions = [
        ("alone", None),
        ("beside a prose cast", repeat(PROSE, 200_000)),
        ("beside a hostile cast", hostile_text()),
    ]
    medians: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-hostile-") as work:
        for label, long_text in conditions:
            with speechd_at(
                args.url, model_dir=args.model_dir, device=args.device, threads=args.threads,
                workdir=Path(work),
            ) as url:  # fmt: skip
                runs = asyncio.run(_beside(url, args.repeat, long_text, label))
            medians[label] = statistics.median(runs)
            if args.url is not None and long_text is not None:
                print("   (--url: the long casts ran one after another on one server)")
    alone = max(medians["alone"], 1e-9)
    hostile, prose = medians["beside a hostile cast"], medians["beside a prose cast"]
    print(f"   median first audio beside a hostile cast / alone: {hostile / alone:.2f}x"
          " (target <= 1.5x)")  # fmt: skip
    print(f"   median first audio beside a hostile cast / beside prose: {hostile / prose:.2f}x"
          " (what the text's shape costs; the rest is sharing the device)")  # fmt: skip


def api(args: argparse.Namespace) -> None:
    from ._hostile_api import run

    print("\napi: pathological requests")
    run(args.url)


def ssml(args: argparse.Namespace) -> None:
    from ._hostile_ssml import ssml as run_ssml

    run_ssml(args)


def words_load(args: argparse.Namespace) -> None:
    from ._hostile_reads import words_load as run

    run(args)


def whole_rss(args: argparse.Namespace) -> None:
    from ._hostile_reads import whole_rss as run

    run(args)


def pauses(args: argparse.Namespace) -> None:
    from ._hostile_pauses import pauses as run

    run(args)


SECTIONS: dict[str, Callable[[argparse.Namespace], None]] = {
    "planning": planning,
    "api": api,
    "ssml": ssml,
    "first-audio": first_audio,
    "words-load": words_load,
    "whole-rss": whole_rss,
    "pauses": pauses,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--section", action="append", choices=sorted(SECTIONS), help="default: all of them"
    )
    parser.add_argument("--n", type=int, default=50_000, help="characters (planning: n and 2n)")
    parser.add_argument("--pattern", action="append", help="planning: only these patterns")
    parser.add_argument("--url", help="first-audio, api: a running speechd (default: start one)")
    parser.add_argument("--model-dir", default=os.environ.get("SPEECHD_TEST_MODEL_DIR"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int)
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="first-audio: runs of each; words-load: rounds (at most 1)",
    )
    parser.add_argument("--mib", type=float, default=50, help="whole-rss: the file's size")
    parser.add_argument(
        "--hold", type=float, default=20, help="whole-rss: seconds the slow readers read"
    )
    parser.add_argument(
        "--pause-s", type=float, help="pauses: cap each document's pause (default: its bound)"
    )
    args = parser.parse_args(argv)
    print(f"speechd hostile-input benchmark, {os.cpu_count()} CPUs")
    print(f"   load average at the start {os.getloadavg()[0]:.1f}")
    for name in args.section or list(SECTIONS):
        SECTIONS[name](args)
    print(f"\n   load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
