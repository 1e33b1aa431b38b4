"""The workers' readings as Prometheus metric families (what the api's /metrics shows).

Every family is labelled by `worker` (the worker's id). A family is left out entirely when no
worker has that figure, so a CPU-only deployment shows no device gauges at all.

    speechd_worker_info{worker,device,device_name,telemetry}     1 per ready worker
    speechd_worker_cpu_seconds_total{worker}                     process CPU time
    speechd_worker_cpu_percent{worker}                           last second, % of one core
    speechd_worker_resident_memory_bytes{worker}
    speechd_worker_gpu_memory_bytes{worker}                      NVML: this process's share
    speechd_worker_audio_made_seconds_total{worker}              audio appended since start
    speechd_worker_energy_joules_total{worker}                   device energy since start
    speechd_worker_energy_per_audio_second_joules{worker}        over the last minute
    speechd_device_gpu_utilization_percent{worker}
    speechd_device_memory_used_bytes{worker,kind}                kind: gpu, or shared (Jetson)
    speechd_device_memory_total_bytes{worker,kind}
    speechd_device_power_watts{worker,rail}                      rail: board, VDD_IN, rails
    speechd_device_rail_power_watts{worker,rail}                 each tegrastats rail
    speechd_device_temperature_celsius{worker,sensor}
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._readings import Readings

if TYPE_CHECKING:  # imported where used: the worker imports this package, not prometheus
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

__all__ = ["WorkerReadings", "telemetry_families"]


@dataclass(frozen=True)
class WorkerReadings:
    """A ready worker as its latest notice tells it: its id, device and readings."""

    worker: str
    device: str
    device_name: str = ""
    readings: Readings | None = None


_Value = Callable[[Readings], float | int | None]

_WORKER_GAUGES: tuple[tuple[str, str, _Value], ...] = (
    (
        "speechd_worker_cpu_percent",
        "The worker process's CPU use over its last sample, in percent of one core.",
        lambda r: r.cpu_percent,
    ),
    (
        "speechd_worker_resident_memory_bytes",
        "The worker process's resident memory.",
        lambda r: r.rss_bytes,
    ),
    (
        "speechd_worker_gpu_memory_bytes",
        "GPU memory the worker process holds (NVML).",
        lambda r: r.process_gpu_memory_bytes,
    ),
    (
        "speechd_worker_energy_per_audio_second_joules",
        "Joules of device power per second of audio the worker made, over the last minute.",
        lambda r: r.energy_per_audio_s,
    ),
    (
        "speechd_device_gpu_utilization_percent",
        "GPU load of the worker's device (NVML utilisation, tegrastats GR3D_FREQ).",
        lambda r: r.gpu_percent,
    ),
)

_WORKER_COUNTERS: tuple[tuple[str, str, _Value], ...] = (
    (
        "speechd_worker_cpu_seconds",
        "User and system CPU seconds of the worker process since it started.",
        lambda r: r.cpu_seconds,
    ),
    (
        "speechd_worker_audio_made_seconds",
        "Seconds of audio the worker appended since it started.",
        lambda r: r.audio_s,
    ),
    (
        "speechd_worker_energy_joules",
        "Joules the worker's device drew since the worker started.",
        lambda r: r.energy_j,
    ),
)


def telemetry_families(workers: Sequence[WorkerReadings]) -> Iterator[Metric]:
    """The families for `workers`, each only when at least one worker has its figure."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    info = GaugeMetricFamily(
        "speechd_worker_info",
        "A ready worker: the device it runs on and where its device figures come from.",
        labels=["worker", "device", "device_name", "telemetry"],
    )
    for w in workers:
        source = w.readings.source if w.readings is not None else ""
        info.add_metric([w.worker, w.device, w.device_name, source or "cpu"], 1)
    if workers:
        yield info
    measured = [(w.worker, w.readings) for w in workers if w.readings is not None]
    for name, doc, value in _WORKER_GAUGES:
        yield from _per_worker(GaugeMetricFamily(name, doc, labels=["worker"]), measured, value)
    for name, doc, value in _WORKER_COUNTERS:
        yield from _per_worker(CounterMetricFamily(name, doc, labels=["worker"]), measured, value)
    yield from _labelled(measured)


def _per_worker(
    family: GaugeMetricFamily | CounterMetricFamily,
    measured: Sequence[tuple[str, Readings]],
    value: _Value,
) -> Iterator[Metric]:
    for worker, readings in measured:
        figure = value(readings)
        if figure is not None:
            family.add_metric([worker], float(figure))
    if family.samples:
        yield family


def _labelled(measured: Sequence[tuple[str, Readings]]) -> Iterator[Metric]:
    from prometheus_client.core import GaugeMetricFamily

    used = GaugeMetricFamily(
        "speechd_device_memory_used_bytes",
        "Memory in use on the worker's device: the GPU's own (gpu) or, on a Jetson, the RAM "
        "CPU and GPU share (shared).",
        labels=["worker", "kind"],
    )
    total = GaugeMetricFamily(
        "speechd_device_memory_total_bytes",
        "Memory of the worker's device (see speechd_device_memory_used_bytes).",
        labels=["worker", "kind"],
    )
    power = GaugeMetricFamily(
        "speechd_device_power_watts",
        "Power the worker's device draws now: the GPU board (board), a Jetson's input rail "
        "(VDD_IN) or the sum of its rails (rails).",
        labels=["worker", "rail"],
    )
    rails = GaugeMetricFamily(
        "speechd_device_rail_power_watts",
        "Power of each rail tegrastats reports.",
        labels=["worker", "rail"],
    )
    temps = GaugeMetricFamily(
        "speechd_device_temperature_celsius",
        "Temperatures the device's source reports, by sensor.",
        labels=["worker", "sensor"],
    )
    for worker, r in measured:
        kind = r.memory_kind or "gpu"
        if r.memory_used_bytes is not None:
            used.add_metric([worker, kind], float(r.memory_used_bytes))
        if r.memory_total_bytes is not None:
            total.add_metric([worker, kind], float(r.memory_total_bytes))
        if r.power_w is not None:
            power.add_metric([worker, r.power_rail or "board"], r.power_w)
        for rail, watts in sorted(r.rails_w.items()):
            rails.add_metric([worker, rail], watts)
        for sensor, celsius in sorted(r.temperatures_c.items()):
            temps.add_metric([worker, sensor], celsius)
    for family in (used, total, power, rails, temps):
        if family.samples:
            yield family
