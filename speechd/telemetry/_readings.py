"""What a worker measures of itself and its device: the shapes its heartbeats carry.

`Readings` travels in the worker's notices (`workers/<id>`, `WorkerNotice.telemetry`), so it
is persisted: it only ever gains fields with defaults. Every figure is optional; a field is
absent (None, or empty) where its source does not exist on the worker's machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

__all__ = ["DeviceSample", "ModelReadings", "Readings"]


class ModelReadings(msgspec.Struct, frozen=True, omit_defaults=True):
    """Where a worker's model is and what taking it and giving it back cost (`--idle-unload`,
    `--max-device-memory`).

    resident: whether the model is held now.
    since_ms: when it was last taken or given back (ms since the epoch).
    load_s: seconds the last load took (the first, or the last wake), its warm-up included.
    wake_s: seconds the last wake took, from the chunk that needed the model until it was
        held again (None before any wake).
    unloads / wakes: how many times the model was given back and taken again.
    rss_held_bytes / rss_unloaded_bytes: the worker's RSS just before the last unload and just
        after it (None before any unload).
    device_held_bytes: device memory the worker holds, where its runtime tells (torch on CUDA:
        its allocator's reserve; 0 while unloaded there); None elsewhere.
    device_budget_bytes: `--max-device-memory`, where it is set.
    """

    resident: bool = True
    since_ms: int = 0
    load_s: float | None = None
    wake_s: float | None = None
    unloads: int = 0
    wakes: int = 0
    rss_held_bytes: int | None = None
    rss_unloaded_bytes: int | None = None
    device_held_bytes: int | None = None
    device_budget_bytes: int | None = None


class Readings(msgspec.Struct, frozen=True, omit_defaults=True):
    """One worker's latest readings.

    source: where the device figures come from: "nvml", "tegrastats", or "" (CPU only).
    cpu_seconds / cpu_percent / rss_bytes: the worker process's user + system CPU time since
        it started, its CPU use over the last sampling interval (percent of one core: 200 is
        two cores busy) and its resident memory.
    gpu_percent: GPU load (NVML utilisation; tegrastats GR3D_FREQ).
    memory_used_bytes / memory_total_bytes / memory_kind: the device's memory, "gpu" (NVML:
        the GPU's own) or "shared" (a Jetson: the RAM CPU and GPU share).
    process_gpu_memory_bytes: GPU memory this worker process holds (NVML only).
    power_w / power_rail: device power now and what it measures: "board" (NVML: the GPU
        board), a Jetson input rail ("VDD_IN"), or "rails" (the sum of the rails tegrastats
        lists, on boards without an input rail, such as AGX Orin).
    rails_w / temperatures_c: every power rail and temperature sensor the source reports.
    energy_j: device energy (joules) since the worker's telemetry started.
    audio_s: seconds of audio this worker appended since it started.
    energy_per_audio_s: joules of device power per second of audio made over the last minute
        (idle spells within it included); None without a power reading or without audio in it.
    model: where the worker's model is and what loading and unloading it cost (`ModelReadings`).
    batch_sizes: how many steps the worker ran at each batch size since it started (a step
        of one chunk is a batch of 1).
    """

    source: str = ""
    cpu_seconds: float = 0.0
    cpu_percent: float | None = None
    rss_bytes: int | None = None
    gpu_percent: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    memory_kind: str = ""
    process_gpu_memory_bytes: int | None = None
    power_w: float | None = None
    power_rail: str = ""
    rails_w: dict[str, float] = {}
    temperatures_c: dict[str, float] = {}
    energy_j: float | None = None
    audio_s: float = 0.0
    energy_per_audio_s: float | None = None
    model: ModelReadings | None = None
    batch_sizes: dict[int, int] = {}


@dataclass(frozen=True)
class DeviceSample:
    """What a device source read at one moment (on the sampler's thread)."""

    gpu_percent: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    memory_kind: str = ""
    process_gpu_memory_bytes: int | None = None
    power_w: float | None = None
    power_rail: str = ""
    rails_w: dict[str, float] = field(default_factory=dict)
    temperatures_c: dict[str, float] = field(default_factory=dict)
    energy_j: float | None = None
    """A cumulative energy counter of the device's own (NVML's, in joules), when it has one:
    more exact than integrating `power_w` between samples."""
