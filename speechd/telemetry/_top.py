"""`speechd top`: the workers, their devices and the casts in flight, live in a terminal.

It reads the api's `GET /metrics` (any api replica shows the same figures), so it needs
nothing but the api's address. It shows how many casts are generating and queued and how far
ahead of their listeners they are, never which casts: a lead is shown as a figure, whatever
labels the metrics give it.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    import httpx

__all__ = ["TopView", "parse_metrics", "render_top", "run_top"]

_CLEAR = "\x1b[H\x1b[2J"


@dataclass
class _Worker:
    worker: str
    device: str = ""
    device_name: str = ""
    cpu_percent: float | None = None
    rss_bytes: float | None = None
    gpu_percent: float | None = None
    memory_used: float | None = None
    memory_total: float | None = None
    power_w: float | None = None
    joules_per_audio_s: float | None = None
    temperature_c: float | None = None
    model: str = ""
    """Where its model is: resident, idle (given back) or waking."""
    load_s: float | None = None
    wake_s: float | None = None
    rss_unloaded: float | None = None
    held: float | None = None
    budget: float | None = None
    fallback: bool = False


@dataclass
class TopView:
    """What one frame of `speechd top` shows, read from one /metrics text."""

    workers_ready: int = 0
    queue_depth: int = 0
    generating: int = 0
    leads_s: list[float] = field(default_factory=list)
    lead_mean_s: float | None = None
    """Where leads come only as a histogram or summary: their mean."""
    lead_min_s: float | None = None
    """Where leads come as a histogram: the smallest, if the api says it."""
    workers: dict[str, _Worker] = field(default_factory=dict)

    @property
    def queued(self) -> int:
        return max(0, self.queue_depth - self.generating)


_PER_WORKER = {
    "speechd_worker_cpu_percent": "cpu_percent",
    "speechd_worker_resident_memory_bytes": "rss_bytes",
    "speechd_device_gpu_utilization_percent": "gpu_percent",
    "speechd_device_memory_used_bytes": "memory_used",
    "speechd_device_memory_total_bytes": "memory_total",
    "speechd_device_power_watts": "power_w",
    "speechd_worker_energy_per_audio_second_joules": "joules_per_audio_s",
    "speechd_worker_model_load_seconds": "load_s",
    "speechd_worker_model_wake_seconds": "wake_s",
    "speechd_worker_unloaded_resident_memory_bytes": "rss_unloaded",
    "speechd_worker_device_memory_held_bytes": "held",
    "speechd_worker_device_memory_budget_bytes": "budget",
}


def parse_metrics(text: str) -> TopView:
    """The figures `speechd top` shows, from speechd's Prometheus text."""
    from prometheus_client.parser import text_string_to_metric_families

    view = TopView()
    lead_sum = lead_count = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, sample.value
            if name == "speechd_workers_ready":
                view.workers_ready = int(value)
            elif name == "speechd_queue_depth":
                view.queue_depth = int(value)
            elif name == "speechd_active_casts":
                view.generating = int(value)
            elif name == "speechd_cast_lead_seconds":
                view.leads_s.append(float(value))  # its labels (a cast, once) are dropped
            elif name in ("speechd_cast_lead_seconds_sum", "speechd_cast_lead_seconds_gsum"):
                lead_sum += value  # a histogram's sum, or the gauge histogram's speechd has
            elif name in ("speechd_cast_lead_seconds_count", "speechd_cast_lead_seconds_gcount"):
                lead_count += value
            elif name == "speechd_cast_lead_min_seconds":
                view.lead_min_s = float(value)
            elif name == "speechd_worker_info" and "worker" in labels:
                worker = view.workers.setdefault(labels["worker"], _Worker(labels["worker"]))
                worker.device = labels.get("device", "")
                worker.device_name = labels.get("device_name", "")
            elif name == "speechd_worker_model_state" and "worker" in labels and value:
                worker = view.workers.setdefault(labels["worker"], _Worker(labels["worker"]))
                worker.model = labels.get("state", "")
            elif name == "speechd_worker_device_fallback" and "worker" in labels:
                worker = view.workers.setdefault(labels["worker"], _Worker(labels["worker"]))
                worker.fallback = bool(value)
            elif name == "speechd_device_temperature_celsius" and "worker" in labels:
                worker = view.workers.setdefault(labels["worker"], _Worker(labels["worker"]))
                worker.temperature_c = max(worker.temperature_c or value, value)
            elif name in _PER_WORKER and "worker" in labels:
                worker = view.workers.setdefault(labels["worker"], _Worker(labels["worker"]))
                setattr(worker, _PER_WORKER[name], float(value))
    if not view.leads_s and lead_count:
        view.lead_mean_s = lead_sum / lead_count
    view.leads_s.sort()
    return view


def _fmt(value: float | None, pattern: str, unit: str = "") -> str:
    return "-" if value is None else format(value, pattern) + unit


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**30:.1f} GiB"


def _leads(view: TopView) -> str:
    leads = view.leads_s
    if leads:
        return (
            f"leads {leads[0]:.1f} s min, {statistics.median(leads):.1f} s median, "
            f"{leads[-1]:.1f} s max"
        )
    if view.lead_mean_s is not None and view.lead_min_s is not None:
        return f"leads {view.lead_min_s:.1f} s min, {view.lead_mean_s:.1f} s mean"
    if view.lead_mean_s is not None:
        return f"leads {view.lead_mean_s:.1f} s mean"
    return "leads -"


def _rows(workers: Iterable[_Worker]) -> list[list[str]]:
    rows = [
        ["WORKER", "DEVICE", "MODEL", "CPU", "RSS", "GPU", "DEV MEM", "HELD", "POWER",
         "J/AUDIO S", "TEMP"]
    ]  # fmt: skip
    for w in sorted(workers, key=lambda w: w.worker):
        memory = "-"
        if w.memory_used is not None and w.memory_total:
            memory = f"{w.memory_used / 2**30:.1f}/{w.memory_total / 2**30:.0f} GiB"
        device = f"{w.device} {w.device_name}".strip() or "-"
        rows.append(
            [
                w.worker,
                ("(fallback) " if w.fallback else "") + device[:32],
                _model(w),
                _fmt(w.cpu_percent, ".0f", "%"),
                _gib(w.rss_bytes),
                _fmt(w.gpu_percent, ".0f", "%"),
                memory,
                _held(w),
                _fmt(w.power_w, ".1f", " W"),
                _fmt(w.joules_per_audio_s, ".2f"),
                _fmt(w.temperature_c, ".0f", " C"),
            ]
        )
    return rows


def _model(w: _Worker) -> str:
    """Where the model is and what its last load or wake took: `resident 2.1 s`, `idle (RSS
    0.6 GiB) wake 1.4 s`, `waking`."""
    state = w.model or "-"
    if w.model == "idle" and w.rss_unloaded is not None:
        state += f" ({_gib(w.rss_unloaded)})"
    if w.wake_s is not None:
        state += f" wake {w.wake_s:.1f} s"
    elif w.load_s is not None and w.model == "resident":
        state += f" load {w.load_s:.1f} s"
    return state


def _held(w: _Worker) -> str:
    """Device memory the worker holds, against its budget where one is set."""
    if w.held is None and w.budget is None:
        return "-"
    held = "-" if w.held is None else f"{w.held / 2**30:.2f}"
    return held + (f"/{w.budget / 2**30:.2f} GiB" if w.budget is not None else " GiB")


def render_top(view: TopView, *, url: str, at: float, interval_s: float) -> str:
    """One frame of `speechd top`, as text."""
    clock = time.strftime("%H:%M:%S", time.localtime(at))
    lines = [
        f"speechd top  {url}  {clock}  (every {interval_s:g} s; Ctrl-C quits)",
        f"workers {view.workers_ready} ready   casts {view.generating} generating, "
        f"{view.queued} queued   {_leads(view)}",
        "",
    ]
    rows = _rows(view.workers.values())
    if len(rows) == 1:
        lines.append("no ready worker reports telemetry")
    else:
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def run_top(
    url: str,
    *,
    interval_s: float = 2.0,
    once: bool = False,
    out: TextIO | None = None,
    client: httpx.Client | None = None,
) -> int:
    """Show frames until interrupted (`once`: one frame). 0, or 1 when `once` cannot read
    the metrics; a live view keeps trying and says why it cannot."""
    import httpx  # here: the worker imports this package and needs no HTTP client

    out = out or sys.stdout
    base = url.rstrip("/")
    live = not once and out.isatty()
    own = client is None
    http = client or httpx.Client(timeout=5.0)
    try:
        while True:
            try:
                response = http.get(base + "/metrics")
                response.raise_for_status()
                frame = render_top(
                    parse_metrics(response.text), url=base, at=time.time(), interval_s=interval_s
                )
            except (httpx.HTTPError, ValueError) as exc:
                frame = f"speechd top: cannot read {base}/metrics: {exc}"
                if once:
                    print(frame, file=sys.stderr)
                    return 1
            out.write((_CLEAR if live else "") + frame + "\n")
            out.flush()
            if once:
                return 0
            time.sleep(interval_s)
    finally:
        if own:
            http.close()
