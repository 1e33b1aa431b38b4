"""`python -m loadtest run --slow-device`: speechd on a device slower than real time, against
Kokoro-FastAPI-style whole-chunk serving and the raw loop, in one run.

No model is loaded: both servers run the cost model of `loadtest._slow` (`--slow-rtf`, 1.3
compute seconds per audio second, and `--slow-overhead`, 0.4 s per model call, by default), so
the run needs no model lock and measures scheduling and chunking alone. For each level c of 1,
2 and 4, eight texts of four sentences (`--quick`: four of two) are sent by c clients, each
sending its next text when the last one ended (a closed loop, as the issue measured), as
streaming `pcm` played by a real-time listener from its first byte:

* `speechd`: `speechd serve` (deadline policy) on the cost model (`loadtest.slow_serve`),
  its listeners held back until their cast plays through (`start: smooth`, the default);
* `speechd-at-once`: the same, each request asking for its first audio at once (`start: now`);
* `whole-chunk`: the baseline (`loadtest.chunked_server --cost-model`);
* the raw loop: each level's texts made back to back in the fewest model calls (the cost
  model's arithmetic: the engine's own speed).

Throughput and silence are judged on `speechd` (smooth play, the default); first audio on both:
`speechd` (honest: what follows plays through) and `speechd-at-once` (first audio at once: the
worker makes a waiting cast's first chunk ahead of its turn, and its listener then waits at the
live edge), each labelled; the throughput of `speechd-at-once` is printed beside.

Printed and written to `slow.md` / `slow.json` in --out: per level and server the throughput
(audio seconds per wall second, and against the raw loop), requests with underruns and
underruns, the total silence heard, first audio p50/p95; then the issue's targets: throughput
>= 0.95x raw at every level (smooth; at once printed too), total silence <= 0.5x the
whole-chunk baseline's (smooth), first audio p50 at c=2 and c=4 <= the baseline's (smooth and
at once, each on its own line).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from itertools import count
from pathlib import Path

import msgspec

from ._client import new_client, run_scenario
from ._results import ListenerResult, ScenarioRun, Summary, summarize
from ._scenarios import Request, Scenario
from ._servers import Server, start_chunked, start_slow_speechd
from ._slow import SlowEngine, slow_raw
from ._workload import paragraph

__all__ = ["LEVELS", "SlowLevel", "SlowReport", "run_slow", "slow_scenarios", "write_slow"]

SPEECHD = "speechd"
SPEECHD_AT_ONCE = "speechd-at-once"
WHOLE_CHUNK = "whole-chunk"
TARGETS = (SPEECHD, SPEECHD_AT_ONCE, WHOLE_CHUNK)
LEVELS = (1, 2, 4)
THROUGHPUT_VS_RAW = 0.95
SILENCE_VS_BASELINE = 0.5


class SlowLevel(msgspec.Struct, frozen=True):
    scenario: str
    concurrency: int
    raw_audio_s: float
    raw_gen_s: float
    raw_chunks: int

    @property
    def raw_capacity(self) -> float:
        return self.raw_audio_s / self.raw_gen_s if self.raw_gen_s > 0 else 0.0


class SlowReport(msgspec.Struct):
    started: str
    quick: bool
    rtf: float
    overhead_s: float
    cpu: str
    cores: int
    python: str
    load_before: float
    levels: list[SlowLevel]
    runs: list[ScenarioRun]
    load_after: float | None = None
    wall_s: float = 0.0


def slow_scenarios(quick: bool) -> list[Scenario]:
    """One scenario per level; every text is unique in the run (casts are content-addressed:
    a text seen before would be replayed, not made)."""
    texts, sentences = (4, 2) if quick else (8, 4)
    numbers = count(1)
    out = []
    for level in LEVELS:
        requests = []
        for i in range(texts):
            n = next(numbers)
            text = f"Part {n}. {paragraph(sentences, 3 * n)}"
            requests.append(Request(0.0, text, f"slow-c{level}-{i}"))
        out.append(
            Scenario(
                f"slow-c{level}",
                "slow",
                tuple(requests),
                targets=TARGETS,
                concurrency=level,
                pool=level,
            )
        )
    return out


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            return next(line.split(":", 1)[1].strip() for line in info if "model name" in line)
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def _line(run: ScenarioRun, level: SlowLevel) -> str:
    s = summarize(run, None)
    ratio = s.throughput / level.raw_capacity if level.raw_capacity else 0.0
    bad = sum(1 for x in run.listeners if x.underruns)
    return (
        f"  {run.target:16s} {run.scenario:8s} {s.throughput:5.3f} audio s/s ({ratio:4.2f}x raw),"
        f" underruns {bad}/{s.requests} requests, {s.underruns} in all,"
        f" silence {s.gap_ms / 1000:7.1f} s, first audio p50 {s.ttfa_p50_s or 0:6.1f} s"
        f" p95 {s.ttfa_p95_s or 0:6.1f} s, held {_held(run)}, errors {sum(s.errors.values())}"
    )


def _held(run: ScenarioRun) -> str:
    """The median start hold speechd stated (`X-Cast-Start-Delay`), or "-" for a server
    without one; with the median least hold that would have done (`_least_hold`) where the
    listeners played through."""
    delays = sorted(x.start_delay_s for x in run.listeners if x.start_delay_s is not None)
    if not delays:
        return "-"
    least = sorted(h for h in map(_least_hold, run.listeners) if h is not None)
    said = f"{delays[len(delays) // 2]:.1f} s"
    return said + (f" (least {least[len(least) // 2]:.1f} s)" if least else "")


def _least_hold(listener: ListenerResult) -> float | None:
    """How short the stated hold could have been with no stall: the hold less the least audio
    the listener had buffered as any later piece arrived (None: no hold stated, a stall, or
    one piece only). Streamed bytes wait out the hold, so the first pieces arrive at once."""
    if listener.start_delay_s is None or listener.underruns or len(listener.timeline) < 2:
        return None
    spare = min(before for _, before, _ in listener.timeline[1:])
    return max(listener.start_delay_s - spare, 0.0)


async def _measure(
    report: SlowReport, servers: Sequence[Server], plan: Sequence[Scenario], out: Path
) -> None:
    levels = {level.scenario: level for level in report.levels}
    async with new_client() as client:
        warm = Scenario("warm-up", "warm-up", (Request(0.0, "Warming up.", "warm-up"),))
        for server in servers:
            await run_scenario(client, server, warm)
        for number, scenario in enumerate(plan):
            turn = number % len(servers)
            for server in [*servers[turn:], *servers[:turn]]:
                result = await run_scenario(client, server, scenario)
                report.runs.append(result)
                print(_line(result, levels[scenario.name]), flush=True)
            write_slow(report, out)


def run_slow(args: argparse.Namespace) -> int:
    began = time.monotonic()
    rtf, overhead = args.slow_rtf, args.slow_overhead
    plan = slow_scenarios(args.quick)
    engine = SlowEngine(rtf=rtf, overhead_s=overhead)
    levels = []
    for scenario in plan:
        raw = slow_raw(engine, [r.text for r in scenario.requests])
        levels.append(
            SlowLevel(scenario.name, scenario.concurrency or 1, raw.audio_s, raw.gen_s, raw.chunks)
        )
    report = SlowReport(
        started=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        quick=args.quick,
        rtf=rtf,
        overhead_s=overhead,
        cpu=_cpu(),
        cores=os.cpu_count() or 0,
        python=platform.python_version(),
        load_before=os.getloadavg()[0],
        levels=levels,
        runs=[],
    )
    print(
        f"slow device: cost model rtf {rtf} + {overhead} s per call; raw loop"
        f" {levels[0].raw_capacity:.3f} audio s/s (load average {report.load_before:.2f})",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="speechd-slow-") as workdir:
        servers: list[Server] = []
        try:
            for target in TARGETS:
                if target in (SPEECHD, SPEECHD_AT_ONCE):
                    server = start_slow_speechd(
                        target,
                        rtf=rtf,
                        overhead_s=overhead,
                        workdir=Path(workdir),
                        start="now" if target == SPEECHD_AT_ONCE else "smooth",
                    )
                else:
                    server = start_chunked(
                        target, workdir=Path(workdir), cost_model=(rtf, overhead)
                    )
                servers.append(server)
                print(f"{target}: waiting for {server.url}/readyz ...", flush=True)
                server.wait_ready()
            asyncio.run(_measure(report, servers, plan, args.out))
        finally:
            for server in servers:
                server.stop()
    report.load_after = os.getloadavg()[0]
    report.wall_s = time.monotonic() - began
    for goal, measured, met in slow_goals(report):
        print(f"goal: {goal}: {measured} -> {met}")
    path = write_slow(report, args.out)
    print(f"report: {path} ({report.wall_s:.0f} s, load average {report.load_after:.2f} after)")
    return 0


def _summaries(report: SlowReport) -> dict[tuple[str, str], Summary]:
    return {(r.scenario, r.target): summarize(r, None) for r in report.runs}


def slow_goals(report: SlowReport) -> list[tuple[str, str, bool | None]]:
    """(goal, what was measured, met) for the issue's three targets."""
    found = _summaries(report)
    out = [
        _throughput_goal(report, found, SPEECHD, ""),
        _throughput_goal(report, found, SPEECHD_AT_ONCE, "at once: "),
    ]
    ours_gap = sum(
        found[(lv.scenario, SPEECHD)].gap_ms
        for lv in report.levels
        if (lv.scenario, SPEECHD) in found
    )
    base_gap = sum(
        found[(lv.scenario, WHOLE_CHUNK)].gap_ms
        for lv in report.levels
        if (lv.scenario, WHOLE_CHUNK) in found
    )
    if base_gap > 0:
        ratio = ours_gap / base_gap
        out.append(
            (
                f"total silence <= {SILENCE_VS_BASELINE}x whole-chunk serving's",
                f"{ours_gap / 1000:.1f} s vs {base_gap / 1000:.1f} s = {ratio:.2f}x",
                ratio <= SILENCE_VS_BASELINE,
            )
        )
    else:
        out.append(
            (
                f"total silence <= {SILENCE_VS_BASELINE}x whole-chunk serving's",
                f"{ours_gap / 1000:.1f} s vs 0 s",
                None if not found else ours_gap == 0,
            )
        )
    for target, label in ((SPEECHD, "smooth"), (SPEECHD_AT_ONCE, "at once")):
        out.append(_first_audio_goal(report, found, target, label))
    return out


def _throughput_goal(
    report: SlowReport, found: dict[tuple[str, str], Summary], target: str, prefix: str
) -> tuple[str, str, bool | None]:
    """Target 1 judged on `target`'s throughput against the raw loop, level by level."""
    parts, ok = [], True
    for level in report.levels:
        ours = found.get((level.scenario, target))
        if ours is None or not level.raw_capacity:
            ok = False
            parts.append(f"c={level.concurrency}: not measured")
            continue
        ratio = ours.throughput / level.raw_capacity
        ok &= ratio >= THROUGHPUT_VS_RAW
        parts.append(f"c={level.concurrency}: {ratio:.2f}x")
    return f"{prefix}throughput >= {THROUGHPUT_VS_RAW}x the raw loop", ", ".join(parts), ok


def _first_audio_goal(
    report: SlowReport, found: dict[tuple[str, str], Summary], target: str, label: str
) -> tuple[str, str, bool | None]:
    """Target 3 judged on `target`'s first audio p50 against whole-chunk serving's."""
    parts, ok = [], True
    for level in report.levels:
        if level.concurrency < 2:
            continue
        ours, base = found.get((level.scenario, target)), found.get((level.scenario, WHOLE_CHUNK))
        if not ours or not base or ours.ttfa_p50_s is None or base.ttfa_p50_s is None:
            ok = False
            parts.append(f"c={level.concurrency}: not measured")
            continue
        ok &= ours.ttfa_p50_s <= base.ttfa_p50_s
        parts.append(f"c={level.concurrency}: {ours.ttfa_p50_s:.1f} s vs {base.ttfa_p50_s:.1f} s")
    goal = f"{label}: first audio p50 at c=2 and c=4 <= whole-chunk serving's"
    return goal, ", ".join(parts), ok


def write_slow(report: SlowReport, out: Path) -> Path:
    """slow.json (everything measured) and slow.md (the tables and the targets) in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "slow.json").write_bytes(msgspec.json.format(msgspec.json.encode(report)))
    found = _summaries(report)
    lines = [
        "# speechd on a device slower than real time",
        "",
        f"Cost model: rtf {report.rtf} + {report.overhead_s} s per model call (slept, so no"
        f" CPU is spent on it); {report.cpu}, {report.cores} cores, Python {report.python};"
        f" load average {report.load_before:.2f} before"
        + (f", {report.load_after:.2f} after" if report.load_after is not None else "")
        + f"; started {report.started}{', quick' if report.quick else ''}.",
        "",
        "| level | server | throughput (audio s/s) | vs raw | requests with underruns"
        " / underruns | silence (s) | first audio p50 / p95 (s)"
        " | stated hold p50 (least that would do) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for level in report.levels:
        lines.append(
            f"| c={level.concurrency} | raw loop | {level.raw_capacity:.3f} | 1.00x | - | - | - |"
            " - |"
        )
        for target in TARGETS:
            s = found.get((level.scenario, target))
            if s is None:
                continue
            run = next(r for r in report.runs if (r.scenario, r.target) == (level.scenario, target))
            bad = sum(1 for x in run.listeners if x.underruns)
            ratio = s.throughput / level.raw_capacity if level.raw_capacity else 0.0
            lines.append(
                f"| c={level.concurrency} | {target} | {s.throughput:.3f} | {ratio:.2f}x |"
                f" {bad} / {s.underruns} | {s.gap_ms / 1000:.1f} |"
                f" {s.ttfa_p50_s or 0:.1f} / {s.ttfa_p95_s or 0:.1f} | {_held(run)} |"
            )
    lines += ["", "## Targets (issue 21)", ""]
    for goal, measured, met in slow_goals(report):
        verdict = "not measured" if met is None else ("met" if met else "NOT met")
        lines.append(f"- {goal}: {measured} ({verdict})")
    path = out / "slow.md"
    path.write_text("\n".join(lines) + "\n")
    return path
