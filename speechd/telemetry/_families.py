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
    speechd_worker_model_state{worker,state}                     1: resident, idle or waking
    speechd_worker_model_load_seconds{worker}                    the last load (or wake)
    speechd_worker_model_wake_seconds{worker}                    the last wake, chunk to model
    speechd_worker_model_unloads_total{worker}
    speechd_worker_model_wakes_total{worker}
    speechd_worker_unloaded_resident_memory_bytes{worker}        RSS after the last unload
    speechd_worker_device_memory_held_bytes{worker}              torch on CUDA: its reserve
    speechd_worker_device_memory_budget_bytes{worker}            --max-device-memory
    speechd_worker_device_fallback{worker}                       1: left its device for the CPU
    speechd_worker_max_batch{worker}                             the most chunks in one pass
    speechd_worker_graph_info{worker,graph}                      1: the decoder graph in use
    speechd_worker_batch_size{worker}                            histogram: chunks per step
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._readings import ModelReadings, Readings

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
    state: str = ""
    """Where its model is: "" held, "idle" given back, "waking" being taken again."""
    fallback: str = ""
    """Why it speaks on the CPU rather than the device it was asked for ("": it does not)."""
    max_batch: int = 0
    """The most chunks it renders in one pass (`--max-batch`, or auto's choice; 0: unknown)."""
    graph: str = ""
    """The decoder it speaks with ("float", "fused", "int8"; "": not said)."""


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
    yield from _model_families(workers)
    yield from _batch_families(workers)
    yield from _graph_family(workers)


def _graph_family(workers: Sequence[WorkerReadings]) -> Iterator[Metric]:
    """The decoder each worker speaks with (none where it does not say)."""
    from prometheus_client.core import GaugeMetricFamily

    graph = GaugeMetricFamily(
        "speechd_worker_graph_info",
        "The decoder the worker speaks with (--graph, or what auto chose at load): float, "
        "fused (float, rewritten) or int8 (ONNX Runtime on a CPU).",
        labels=["worker", "graph"],
    )
    for w in workers:
        if w.graph:
            graph.add_metric([w.worker, w.graph], 1.0)
    if graph.samples:
        yield graph


#: Buckets of `speechd_worker_batch_size` (chunks per step).
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32)


def _batch_families(workers: Sequence[WorkerReadings]) -> Iterator[Metric]:
    """What each worker batches: the most it may (`--max-batch`), and every step it ran."""
    from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily

    limit = GaugeMetricFamily(
        "speechd_worker_max_batch",
        "The most chunks the worker renders in one forward pass: --max-batch, or what auto "
        "measured at warm-up (1: it never batches).",
        labels=["worker"],
    )
    for w in workers:
        if w.max_batch > 0:
            limit.add_metric([w.worker], float(w.max_batch))
    if limit.samples:
        yield limit
    sizes = HistogramMetricFamily(
        "speechd_worker_batch_size",
        "Chunks per step the worker ran (one chunk alone is a batch of 1).",
        labels=["worker"],
    )
    for w in workers:
        counts = w.readings.batch_sizes if w.readings is not None else {}
        if not counts:
            continue
        buckets = [
            (f"{le:g}", float(sum(n for size, n in counts.items() if size <= le)))
            for le in _BATCH_BUCKETS
        ]
        buckets.append(("+Inf", float(sum(counts.values()))))
        total = float(sum(size * n for size, n in counts.items()))
        sizes.add_metric([w.worker], buckets, total)
    if sizes.samples:
        yield sizes


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


_ModelValue = Callable[[ModelReadings], float | int | None]

_MODEL_GAUGES: tuple[tuple[str, str, _ModelValue], ...] = (
    (
        "speechd_worker_model_load_seconds",
        "Seconds the worker's last model load (the first, or the last wake) took.",
        lambda m: m.load_s,
    ),
    (
        "speechd_worker_model_wake_seconds",
        "Seconds the worker's last wake took, from the chunk that needed the model to the "
        "model held again.",
        lambda m: m.wake_s,
    ),
    (
        "speechd_worker_unloaded_resident_memory_bytes",
        "The worker process's resident memory just after it last gave its model back.",
        lambda m: m.rss_unloaded_bytes,
    ),
    (
        "speechd_worker_device_memory_held_bytes",
        "Device memory the worker holds, where its runtime tells (torch on CUDA).",
        lambda m: m.device_held_bytes,
    ),
    (
        "speechd_worker_device_memory_budget_bytes",
        "The device memory the worker may hold (--max-device-memory).",
        lambda m: m.device_budget_bytes,
    ),
)

_MODEL_COUNTERS: tuple[tuple[str, str, _ModelValue], ...] = (
    (
        "speechd_worker_model_unloads",
        "Times the worker gave its model back after --idle-unload with nothing to make.",
        lambda m: m.unloads,
    ),
    (
        "speechd_worker_model_wakes",
        "Times the worker took its model again for a cast.",
        lambda m: m.wakes,
    ),
)


def _model_families(workers: Sequence[WorkerReadings]) -> Iterator[Metric]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    state = GaugeMetricFamily(
        "speechd_worker_model_state",
        "Where the worker's model is: resident (held), idle (given back after --idle-unload; "
        "the worker is ready, a cast wakes it) or waking (being taken again).",
        labels=["worker", "state"],
    )
    fallback = GaugeMetricFamily(
        "speechd_worker_device_fallback",
        "1 when the worker speaks on the CPU rather than the device it was asked for (a full "
        "device or a failed sanity check; /readyz says why).",
        labels=["worker"],
    )
    for w in workers:
        state.add_metric([w.worker, w.state or "resident"], 1)
        if w.fallback:
            fallback.add_metric([w.worker], 1)
    if workers:
        yield state
    if fallback.samples:
        yield fallback
    models = [
        (w.worker, w.readings.model)
        for w in workers
        if w.readings is not None and w.readings.model is not None
    ]
    for name, doc, value in _MODEL_GAUGES:
        yield from _per_model(GaugeMetricFamily(name, doc, labels=["worker"]), models, value)
    for name, doc, value in _MODEL_COUNTERS:
        yield from _per_model(CounterMetricFamily(name, doc, labels=["worker"]), models, value)


def _per_model(
    family: GaugeMetricFamily | CounterMetricFamily,
    models: Sequence[tuple[str, ModelReadings]],
    value: _ModelValue,
) -> Iterator[Metric]:
    for worker, model in models:
        figure = value(model)
        if figure is not None:
            family.add_metric([worker], float(figure))
    if family.samples:
        yield family
