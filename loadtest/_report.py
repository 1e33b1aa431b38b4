"""The report of a run: report.json (every measurement, the summaries and the goals), report.md
(tables, ratios against each baseline) and PNG plots, all in one folder.

`write_report` works from a `Run` alone, so `python -m loadtest report DIR/report.json` redraws
a report from its JSON.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import msgspec

from ._results import Run, ScenarioRun, Summary, summarize
from ._scenarios import NAIVE, SPEECHD, SPEECHD_FIFO, SPEECHD_ONNX

__all__ = ["Goal", "Report", "buffer_curve", "build_report", "goals", "load_report", "write_report"]

TTFA_VS_NAIVE = 0.35
SMOOTH_LOAD = 0.8
THROUGHPUT_VS_RAW = 0.9
ONNX_RTF_VS_TORCH = 0.8


class Goal(msgspec.Struct, frozen=True):
    goal: str
    measured: str
    met: bool | None
    """None: this run has no figure to judge it by (a baseline or scenario was not run)."""


class Report(msgspec.Struct):
    run: Run
    summaries: list[Summary]
    goals: list[Goal]


def _find(summaries: Iterable[Summary], scenario: str, target: str) -> Summary | None:
    return next((s for s in summaries if s.scenario == scenario and s.target == target), None)


def _saturation(run: Run) -> str | None:
    """The concurrency scenario with the most requests: the engine can't keep up there."""
    sweep = [r for r in run.runs if r.concurrency is not None and r.target == SPEECHD]
    return max(sweep, key=lambda r: r.concurrency or 0).scenario if sweep else None


def goals(run: Run, summaries: Sequence[Summary]) -> list[Goal]:
    out: list[Goal] = []
    ours, naive = (
        _find(summaries, "concurrency-1", SPEECHD),
        _find(summaries, "concurrency-1", NAIVE),
    )
    if ours and naive and ours.ttfa_p50_s is not None and naive.ttfa_p50_s:
        ratio = ours.ttfa_p50_s / naive.ttfa_p50_s
        measured = f"{ours.ttfa_p50_s:.2f} s vs {naive.ttfa_p50_s:.2f} s = {ratio:.2f}x"
        out.append(Goal(_TTFA_GOAL, measured, ratio <= TTFA_VS_NAIVE))
    else:
        out.append(Goal(_TTFA_GOAL, "not measured", None))
    light = [
        s
        for s in summaries
        if s.target == SPEECHD and s.offered_load is not None and s.offered_load <= SMOOTH_LOAD
    ]
    if light:
        underruns = sum(s.underruns for s in light)
        where = ", ".join(f"{s.scenario} ({s.offered_load:.0%}): {s.underruns}" for s in light)
        out.append(Goal(_SMOOTH_GOAL, f"{underruns} underruns; {where}", underruns == 0))
    else:
        out.append(Goal(_SMOOTH_GOAL, "no scenario at or below that load", None))
    saturation = _saturation(run)
    busiest = _find(summaries, saturation, SPEECHD) if saturation else None
    if busiest and run.raw:
        ratio = busiest.throughput / run.raw.capacity
        measured = (
            f"{busiest.throughput:.2f} vs {run.raw.capacity:.2f} audio s/s"
            f" ({saturation}) = {ratio:.2f}x"
        )
        out.append(Goal(_THROUGHPUT_GOAL, measured, ratio >= THROUGHPUT_VS_RAW))
    else:
        out.append(Goal(_THROUGHPUT_GOAL, "not measured", None))
    onnx = _find(summaries, saturation, SPEECHD_ONNX) if saturation else None
    if onnx and run.raw_onnx:
        ratio = onnx.throughput / run.raw_onnx.capacity
        measured = (
            f"{onnx.throughput:.2f} vs {run.raw_onnx.capacity:.2f} audio s/s"
            f" ({saturation}) = {ratio:.2f}x"
        )
        out.append(Goal(_ONNX_THROUGHPUT_GOAL, measured, ratio >= THROUGHPUT_VS_RAW))
    else:
        out.append(Goal(_ONNX_THROUGHPUT_GOAL, "not measured", None))
    if run.raw and run.raw_onnx:
        ratio = run.raw_onnx.rtf / run.raw.rtf
        measured = f"rtf {run.raw_onnx.rtf:.3f} vs {run.raw.rtf:.3f} = {ratio:.2f}x"
        out.append(Goal(_ONNX_RTF_GOAL, measured, ratio <= ONNX_RTF_VS_TORCH))
    else:
        out.append(Goal(_ONNX_RTF_GOAL, "not measured", None))
    return out


_TTFA_GOAL = f"p50 time to first audio at concurrency 1 <= {TTFA_VS_NAIVE}x the naive server's"
_SMOOTH_GOAL = f"zero underruns at offered load <= {SMOOTH_LOAD:.0%} of capacity"
_THROUGHPUT_GOAL = f"throughput at saturation >= {THROUGHPUT_VS_RAW}x the raw engine loop"
_ONNX_THROUGHPUT_GOAL = (
    f"speechd-onnx throughput at saturation >= {THROUGHPUT_VS_RAW}x the ONNX Runtime raw loop"
)
_ONNX_RTF_GOAL = f"ONNX Runtime raw loop rtf <= {ONNX_RTF_VS_TORCH}x torch's"


def build_report(run: Run) -> Report:
    summaries = [summarize(r, run.raw_for(r.target)) for r in run.runs]
    return Report(run, summaries, goals(run, summaries))


def load_report(path: Path) -> Report:
    return msgspec.json.decode(path.read_bytes(), type=Report)


def write_report(run: Run, out: Path) -> Report:
    """report.json, report.md and the plots of `run`, in folder `out`."""
    out.mkdir(parents=True, exist_ok=True)
    report = build_report(run)
    (out / "report.json").write_bytes(msgspec.json.format(msgspec.json.encode(report), indent=1))
    plots = _plots(run, out)
    (out / "report.md").write_text(_markdown(report, plots))
    return report


# -- Markdown ---------------------------------------------------------------------------------


def _s(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _ratio(ours: float | None, theirs: float | None) -> str:
    if ours is None or not theirs:
        return "-"
    return f"{ours / theirs:.2f}x"


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _markdown(report: Report, plots: Sequence[str]) -> str:
    run, m = report.run, report.run.machine
    lines = [
        f"# speechd load test{' (quick)' if run.quick else ''}",
        "",
        f"Run {run.started}, {run.wall_s:.0f} s in all. Every request is a streaming `POST"
        " /v1/audio/speech` of `pcm` audio, played by a simulated real-time listener from its"
        " first audio byte (`loadtest/_listener.py`).",
        "",
        f"**Machine:** {m.cpu}, {m.cores} cores, {m.ram_gib:.0f} GiB RAM; device {m.device};"
        f" torch {m.torch}, {m.threads or 'default'} threads; Python {m.python}.",
    ]
    if m.shared:
        lines += [
            "",
            f"**Measured on a shared machine:** other work ran on these cores meanwhile (load"
            f" average {m.load_before:.1f} before, {_s(m.load_after, 1)} after), so every"
            " figure is noisy; compare servers within this run, not across runs.",
        ]
    lines += ["", "## Goals", "", "| goal | measured | met |", "|---|---|---|"]
    verdict = {True: "yes", False: "**no**", None: "-"}
    lines += [f"| {g.goal} | {g.measured} | {verdict[g.met]} |" for g in report.goals]
    if run.raw:
        r = run.raw
        rounds = ", ".join(f"{x.capacity:.2f}" for x in run.raw_rounds)
        lines += [
            "",
            f"**Raw engine loop** (no server, the physical limit; the best of the rounds run"
            f" before and after the servers: {rounds or r.capacity} audio s/s): {r.audio_s:.1f}"
            f" s of audio in {r.gen_s:.1f} s, rtf {r.rtf:.3f}, capacity {r.capacity:.2f} audio"
            f" s per wall s, {r.chunks} chunks, median chunk {r.chunk_time_s:.2f} s.",
        ]
    if run.raw_onnx:
        r = run.raw_onnx
        rounds = ", ".join(f"{x.capacity:.2f}" for x in run.raw_onnx_rounds)
        lines += [
            "",
            f"**Raw engine loop on ONNX Runtime** (speechd-onnx's baseline; rounds: {rounds}"
            f" audio s/s): {r.audio_s:.1f} s of audio in {r.gen_s:.1f} s, rtf {r.rtf:.3f},"
            f" capacity {r.capacity:.2f}, {r.chunks} chunks, median chunk"
            f" {r.chunk_time_s:.2f} s.",
        ]
    lines += [
        "",
        "## Scenarios",
        "",
        "Offered load: the most casts playing at once x the raw rtf (1.0 = the engine is just"
        " able to keep up). Throughput: distinct audio seconds made per wall second. RSS:"
        " peak VmRSS (MiB) during the scenario, api process and worker process tree. Load:"
        " the machine's 1-minute load average as the scenario ended.",
        "",
        "| scenario | server | requests | offered load | TTFA p50 / p95 / max (s) | underruns"
        " | gap (ms) | throughput | errors | casts new / shared | api RSS | worker RSS | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in report.summaries:
        errors = ", ".join(f"{k}: {v}" for k, v in sorted(s.errors.items())) or "0"
        casts = "-" if s.casts_new is None else f"{s.casts_new} / {s.casts_shared}"
        load = "-" if s.offered_load is None else f"{s.offered_load:.0%}"
        lines.append(
            f"| {s.scenario} | {s.target} | {s.requests} | {load} | {_s(s.ttfa_p50_s)} /"
            f" {_s(s.ttfa_p95_s)} / {_s(s.ttfa_max_s)} | {s.underruns} | {s.gap_ms:.0f} |"
            f" {s.throughput:.2f} | {errors} | {casts} |"
            f" {_mib(s.rss_peak and s.rss_peak.api_mib)} |"
            f" {_mib(s.rss_peak and s.rss_peak.worker_mib)} | {_s(s.load_avg, 1)} |"
        )
    lines += _ratios(report)
    lines += _memory(report)
    lines += _worker_metrics(report)
    if plots:
        lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    return "\n".join(lines) + "\n"


def _ratios(report: Report) -> list[str]:
    lines = [
        "",
        "## speechd against each baseline",
        "",
        "Ratios are speechd / baseline (below 1 is better for time to first audio; above 1"
        " for throughput); speechd-onnx is measured against speechd on torch, the naive server"
        " and its own runtime's raw loop.",
        "",
        "| scenario | server | baseline | TTFA p50 | TTFA p95 | TTFA max | underruns | gap (ms) |"
        " throughput |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    run = report.run
    for ours in (s for s in report.summaries if s.target in (SPEECHD, SPEECHD_ONNX)):
        raw = run.raw_for(ours.target)
        baselines = (SPEECHD_FIFO, NAIVE) if ours.target == SPEECHD else (SPEECHD, NAIVE)
        for name in baselines:
            theirs = _find(report.summaries, ours.scenario, name)
            if theirs is None:
                continue
            lines.append(
                f"| {ours.scenario} | {ours.target} | {name} |"
                f" {_ratio(ours.ttfa_p50_s, theirs.ttfa_p50_s)} |"
                f" {_ratio(ours.ttfa_p95_s, theirs.ttfa_p95_s)} |"
                f" {_ratio(ours.ttfa_max_s, theirs.ttfa_max_s)} |"
                f" {ours.underruns} vs {theirs.underruns} |"
                f" {ours.gap_ms:.0f} vs {theirs.gap_ms:.0f} |"
                f" {_ratio(ours.throughput, theirs.throughput)} |"
            )
        if raw:
            lines.append(
                f"| {ours.scenario} | {ours.target} | raw engine | - | - | - | - | - |"
                f" {_ratio(ours.throughput, raw.capacity)} |"
            )
    return lines


def _memory(report: Report) -> list[str]:
    lines = [
        "",
        "## Memory",
        "",
        "VmRSS in MiB, in the order the scenarios ran on each server (peak during the"
        " scenario / at its end): growth from row to row on one server is memory kept.",
        "",
        "| server | scenario | api peak / end | worker peak / end |",
        "|---|---|---|---|",
    ]
    servers = list(dict.fromkeys(s.target for s in report.summaries))
    for s in sorted(report.summaries, key=lambda s: servers.index(s.target)):
        if s.rss_peak is None:
            continue
        end = s.rss_end
        lines.append(
            f"| {s.target} | {s.scenario} |"
            f" {_mib(s.rss_peak.api_mib)} / {_mib(end and end.api_mib)} |"
            f" {_mib(s.rss_peak.worker_mib)} / {_mib(end and end.worker_mib)} |"
        )
    return lines


def _worker_metrics(report: Report) -> list[str]:
    rows = [s for s in report.summaries if s.worker_metrics is not None]
    if not rows:
        return []
    lines = [
        "",
        "## The worker's figures in /metrics",
        "",
        "What speechd's own /metrics showed while each scenario ran (scraped about once a"
        " second; the worker measures them and carries them in its heartbeats): its CPU use"
        " in percent of one core (200 = two cores busy), its RSS, and where the device has a"
        " power reading, power and joules per second of audio made.",
        "",
        "| server | scenario | samples | worker CPU mean / max | worker RSS max | power mean |"
        " J per audio s |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in rows:
        m = s.worker_metrics
        assert m is not None
        cpu = (
            "-"
            if m.cpu_percent_mean is None
            else (f"{m.cpu_percent_mean:.0f}% / {m.cpu_percent_max or 0:.0f}%")
        )
        lines.append(
            f"| {s.target} | {s.scenario} | {m.samples} | {cpu} | {_mib(m.rss_mib_max)} |"
            f" {_s(m.power_w_mean, 1)} | {_s(m.joules_per_audio_s, 2)} |"
        )
    return lines


# -- plots ------------------------------------------------------------------------------------


def _plots(run: Run, out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    for stale in out.glob("timeline_*.png"):  # a partial report's saturation may have moved on
        stale.unlink()
    names = []
    if _plot_ttfa(run, out / "ttfa_vs_concurrency.png"):
        names.append("ttfa_vs_concurrency.png")
    scenarios = ["staggered", _saturation(run)]
    for scenario in dict.fromkeys(s for s in scenarios if s):
        runs = [r for r in run.runs if r.scenario == scenario]
        if runs:
            name = f"timeline_{scenario}.png"
            _plot_timeline(runs, out / name)
            names.append(name)
    return names


def _plot_ttfa(run: Run, path: Path) -> bool:
    import matplotlib.pyplot as plt
    from matplotlib.ticker import ScalarFormatter

    sweep = [r for r in run.runs if r.concurrency is not None]
    if not sweep:
        return False
    summaries = [(r.concurrency, summarize(r, run.raw_for(r.target))) for r in sweep]
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for target in dict.fromkeys(r.target for r in sweep):
        points = sorted((c, s) for c, s in summaries if s.target == target and s.ttfa_p50_s)
        xs = [c for c, _ in points]
        line = axes.plot(xs, [s.ttfa_p50_s for _, s in points], marker="o", label=f"{target} p50")
        color = line[0].get_color()
        axes.plot(xs, [s.ttfa_p95_s for _, s in points], ls="--", color=color, alpha=0.7)
        axes.plot(xs, [s.ttfa_max_s for _, s in points], ls=":", marker="^", color=color, alpha=0.5)
    axes.set_xscale("log", base=2)
    axes.set_xticks(sorted({r.concurrency or 1 for r in sweep}))
    axes.xaxis.set_major_formatter(ScalarFormatter())
    axes.set_xlabel("simultaneous streaming requests")
    axes.set_ylabel("time to first audio (s)")
    axes.set_title("Time to first audio (solid p50, dashed p95, dotted max)")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def buffer_curve(
    at_s: float, timeline: Sequence[Sequence[float]]
) -> tuple[list[float], list[float]]:
    """The listener's buffered audio over scenario time: up at each arrival, draining at one
    second per second in between, flat at zero while stalled."""
    xs: list[float] = []
    ys: list[float] = []
    for n, (t, before, after) in enumerate(timeline):
        xs += [at_s + t, at_s + t]
        ys += [before, after]
        next_t = timeline[n + 1][0] if n + 1 < len(timeline) else None
        if next_t is None or t + after < next_t:
            xs.append(at_s + t + after)
            ys.append(0.0)
    return xs, ys


def _plot_timeline(runs: Sequence[ScenarioRun], path: Path) -> None:
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(
        len(runs), 1, figsize=(9, 2.8 * len(runs)), sharex=True, squeeze=False
    )
    for ax, run in zip(axes[:, 0], runs, strict=True):
        for listener in run.listeners:
            xs, ys = buffer_curve(listener.at_s, listener.timeline)
            ax.plot(xs, ys, lw=1.2, label=listener.label)
            ax.axvline(listener.at_s, color="grey", lw=0.5, alpha=0.4)
        ax.set_title(f"{run.target}: {run.scenario}", fontsize=10)
        ax.set_ylabel("buffered audio (s)")
        ax.grid(alpha=0.3)
        if len(run.listeners) <= 10:
            ax.legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("seconds since the scenario started (grey: requests sent)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
