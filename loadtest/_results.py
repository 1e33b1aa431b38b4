"""What a run measured (msgspec Structs, written as report.json) and the figures derived from it.

The raw measurements (every listener's arrivals) are kept; `summarize` derives the per-scenario
figures from them, so a report can be redrawn from the JSON alone.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter

import msgspec

__all__ = [
    "ListenerResult",
    "Machine",
    "RawResult",
    "Rss",
    "Run",
    "ScenarioRun",
    "Summary",
    "WorkerMetrics",
    "offered_load",
    "percentile",
    "summarize",
]


class Rss(msgspec.Struct, frozen=True):
    """MiB of VmRSS: the server process (speechd's api) and its descendants (the worker)."""

    api_mib: float
    worker_mib: float


class WorkerMetrics(msgspec.Struct, frozen=True):
    """The worker's own figures as speechd's /metrics showed them during a scenario (sampled
    about once a second; the worker measures them, summed over its workers)."""

    samples: int
    cpu_percent_mean: float | None = None
    """Percent of one core (200 = two cores busy)."""
    cpu_percent_max: float | None = None
    rss_mib_max: float | None = None
    power_w_mean: float | None = None
    joules_per_audio_s: float | None = None
    """The last reading of speechd_worker_energy_per_audio_second_joules (a power reading
    is needed: NVML or tegrastats)."""
    max_batch: int | None = None
    """speechd_worker_max_batch: the most chunks its worker renders in one pass."""
    chunks_per_step: float | None = None
    """Chunks per step its worker ran while the scenario ran (speechd_worker_batch_size:
    1.0 is batch 1 throughout; between the first and the last sample)."""


class ListenerResult(msgspec.Struct, frozen=True):
    label: str
    text: str
    at_s: float
    ttfa_s: float | None
    audio_s: float
    underruns: int
    gap_ms: float
    ended_s: float | None
    """Seconds after the scenario started that the response ended."""
    error: str | None = None
    cast_id: str | None = None
    timeline: list[tuple[float, float, float]] = []
    """(seconds since sent, audio buffered before, after) per arrival."""
    start_delay_s: float | None = None
    """speechd's `X-Cast-Start-Delay`: how long it held the audio back to play through."""


class ScenarioRun(msgspec.Struct, frozen=True):
    scenario: str
    kind: str
    target: str
    concurrency: int | None
    wall_s: float
    """From the scenario's start to the last response's end."""
    listeners: list[ListenerResult]
    rss_peak: Rss | None = None
    rss_end: Rss | None = None
    casts_new: int | None = None
    casts_shared: int | None = None
    """speechd's casts_submitted_total by outcome during the scenario (None: not speechd)."""
    load_avg: float | None = None
    """The machine's 1-minute load average as the scenario ended (others' work shows here)."""
    worker_metrics: WorkerMetrics | None = None
    """The worker's CPU use and RSS (and device figures) from speechd's /metrics."""


class RawResult(msgspec.Struct, frozen=True):
    audio_s: float
    gen_s: float
    rtf: float
    capacity: float
    chunks: int
    chunk_time_s: float


class Machine(msgspec.Struct, frozen=True):
    cpu: str
    cores: int
    ram_gib: float
    torch: str
    threads: int | None
    device: str
    python: str
    load_before: float
    load_after: float | None = None
    shared: bool = True
    """True when other work ran on the machine meanwhile (figures are noisy)."""


class Run(msgspec.Struct):
    started: str
    quick: bool
    machine: Machine
    raw: RawResult | None
    """The best raw engine loop of `raw_rounds`: what the engine can do on this machine."""
    runs: list[ScenarioRun]
    wall_s: float = 0.0
    raw_rounds: list[RawResult] = []
    raw_onnx: RawResult | None = None
    """The same raw loop on ONNX Runtime (the baseline of the speechd-onnx server)."""
    raw_onnx_rounds: list[RawResult] = []

    def raw_for(self, target: str) -> RawResult | None:
        """The raw loop a server is measured against: its own runtime's."""
        return self.raw_onnx if target.endswith("-onnx") else self.raw


class Summary(msgspec.Struct, frozen=True):
    scenario: str
    target: str
    requests: int
    offered_load: float | None
    """Peak of (casts playing at once x raw rtf): 1.0 is every core busy keeping up."""
    ttfa_p50_s: float | None
    ttfa_p95_s: float | None
    ttfa_max_s: float | None
    underruns: int
    gap_ms: float
    audio_s: float
    """Distinct audio made: each distinct text once."""
    throughput: float
    """Distinct audio seconds per wall second."""
    errors: dict[str, int]
    rss_peak: Rss | None
    rss_end: Rss | None
    casts_new: int | None
    casts_shared: int | None
    distinct_casts: int
    load_avg: float | None
    worker_metrics: WorkerMetrics | None = None


def percentile(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile (no interpolation between so few samples); None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def _distinct_audio(run: ScenarioRun) -> dict[str, float]:
    audio: dict[str, float] = {}
    for listener in run.listeners:
        audio[listener.text] = max(audio.get(listener.text, 0.0), listener.audio_s)
    return audio


def offered_load(run: ScenarioRun, rtf: float) -> float:
    """The most casts playing in real time at once (each from its request for its audio
    length) times the raw engine's rtf: above 1, no scheduler can keep everyone playing."""
    audio = _distinct_audio(run)
    starts: dict[str, float] = {}
    for listener in run.listeners:
        starts[listener.text] = min(starts.get(listener.text, math.inf), listener.at_s)
    edges = sorted(
        [(starts[text], 1) for text in audio] + [(starts[text] + audio[text], -1) for text in audio]
    )
    playing = peak = 0
    for _, step in edges:
        playing += step
        peak = max(peak, playing)
    return peak * rtf


def summarize(run: ScenarioRun, raw: RawResult | None) -> Summary:
    ttfas = [x.ttfa_s for x in run.listeners if x.ttfa_s is not None]
    audio = sum(_distinct_audio(run).values())
    return Summary(
        scenario=run.scenario,
        target=run.target,
        requests=len(run.listeners),
        offered_load=None if raw is None else offered_load(run, raw.rtf),
        ttfa_p50_s=statistics.median(ttfas) if ttfas else None,
        ttfa_p95_s=percentile(ttfas, 95),
        ttfa_max_s=max(ttfas, default=None),
        underruns=sum(x.underruns for x in run.listeners),
        gap_ms=sum(x.gap_ms for x in run.listeners),
        audio_s=audio,
        throughput=audio / run.wall_s if run.wall_s > 0 else 0.0,
        errors=dict(Counter(x.error for x in run.listeners if x.error is not None)),
        rss_peak=run.rss_peak,
        rss_end=run.rss_end,
        casts_new=run.casts_new,
        casts_shared=run.casts_shared,
        distinct_casts=len({x.cast_id for x in run.listeners if x.cast_id is not None}),
        load_avg=run.load_avg,
        worker_metrics=run.worker_metrics,
    )
