"""The worker's sampler: one thread that reads the process and its device every second.

Nothing here runs on the worker's event loop but `reading()` and `audio_made()`, which only
take a lock: NVML calls, `/proc` reads and tegrastats' pipe are all on threads of their own.
Energy is the device's own counter where it has one (NVML on Volta and later), else power
integrated between samples (trapezoids; a sample without power breaks the sum, it does not
guess across the gap).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

import msgspec

from ._cpu import cpu_seconds, rss_bytes
from ._nvml import NvmlSource
from ._readings import DeviceSample, ModelReadings, Readings
from ._tegrastats import TegrastatsSource, find_tegrastats

__all__ = ["DeviceSource", "Telemetry", "start_telemetry"]

log = logging.getLogger("speechd.telemetry")

#: Below this much audio in the window, joules per audio second would be mostly noise.
_MIN_AUDIO_S = 1.0


class DeviceSource(Protocol):
    """A device's figures, read on the sampler's thread (NVML, tegrastats, a test's fake)."""

    name: str

    def sample(self) -> DeviceSample | None: ...

    def close(self) -> None: ...


class Telemetry:
    """A worker process's readings: its CPU time and memory, and its device's when `device`
    is given. `start()` samples every `interval_s` on a daemon thread; `tick()` takes one
    sample now (what the thread calls; tests call it directly with their own clock).

    `energy_per_audio_s` is measured over the last `window_s` seconds: device energy over
    that window divided by the audio the worker reported (`audio_made`) in it.
    """

    def __init__(
        self,
        device: DeviceSource | None = None,
        *,
        device_name: str = "",
        interval_s: float = 1.0,
        window_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        cpu: Callable[[], float] = cpu_seconds,
        rss: Callable[[], int | None] = rss_bytes,
    ) -> None:
        self.device_name = device_name
        self._device = device
        self._interval_s = interval_s
        self._window_s = window_s
        self._clock = clock
        self._cpu = cpu
        self._rss = rss
        self._lock = threading.Lock()
        self._latest = Readings(source=device.name if device is not None else "")
        self._audio_s = 0.0
        self._batches: dict[int, int] = {}
        self._model: ModelReadings | None = None
        self._energy_j: float | None = None
        self._previous: tuple[float, float] | None = None  # (time, cpu seconds)
        self._power: tuple[float, float] | None = None  # (time, watts) of the last sample
        self._counter: float | None = None  # the device's energy counter at the last sample
        self._history: deque[tuple[float, float | None, float]] = deque()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failed = False

    # -- on the worker's event loop (a lock, nothing else) -------------------------------

    def reading(self) -> Readings:
        """The latest readings, with the audio reported up to now, the model's state and the
        batches run."""
        with self._lock:
            return msgspec.structs.replace(
                self._latest,
                audio_s=round(self._audio_s, 3),
                model=self._model,
                batch_sizes=dict(self._batches),
            )

    def batch_ran(self, size: int) -> None:
        """Count one step of `size` chunks (1: a chunk alone)."""
        with self._lock:
            self._batches[size] = self._batches.get(size, 0) + 1

    def model(self, readings: ModelReadings) -> None:
        """Where the worker's model is now, and what loading and unloading it cost."""
        with self._lock:
            self._model = readings

    def resident_bytes(self) -> int | None:
        """The worker process's RSS now (a /proc read: cheap, but not on a hot path)."""
        return self._rss()

    def audio_made(self, seconds: float) -> None:
        """Count `seconds` of audio the worker appended."""
        if seconds > 0:
            with self._lock:
                self._audio_s += seconds

    # -- the sampler ------------------------------------------------------------------------

    def start(self) -> Telemetry:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="speechd-telemetry", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop sampling and close the device source (ends tegrastats)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._device is not None:
            self._device.close()

    def _run(self) -> None:
        while True:
            try:
                self.tick()
            except Exception:  # a source's bug must not end the worker, nor spam its log
                if not self._failed:
                    log.exception("telemetry sample failed; later failures are not logged")
                    self._failed = True
            if self._stop.wait(self._interval_s):
                return

    def tick(self) -> None:
        """Take one sample of the process and the device."""
        now = self._clock()
        cpu = self._cpu()
        rss = self._rss()
        sample = self._device.sample() if self._device is not None else None
        with self._lock:
            cpu_percent = None
            if self._previous is not None and now > self._previous[0]:
                cpu_percent = (cpu - self._previous[1]) / (now - self._previous[0]) * 100
            self._previous = (now, cpu)
            self._add_energy(now, sample)
            per_audio = self._per_audio(now)
            s = sample or DeviceSample()
            self._latest = Readings(
                source=self._latest.source,
                cpu_seconds=round(cpu, 3),
                cpu_percent=None if cpu_percent is None else round(max(cpu_percent, 0.0), 1),
                rss_bytes=rss,
                gpu_percent=s.gpu_percent,
                memory_used_bytes=s.memory_used_bytes,
                memory_total_bytes=s.memory_total_bytes,
                memory_kind=s.memory_kind,
                process_gpu_memory_bytes=s.process_gpu_memory_bytes,
                power_w=None if s.power_w is None else round(s.power_w, 3),
                power_rail=s.power_rail,
                rails_w={k: round(v, 3) for k, v in s.rails_w.items()},
                temperatures_c=dict(s.temperatures_c),
                energy_j=None if self._energy_j is None else round(self._energy_j, 3),
                audio_s=round(self._audio_s, 3),
                energy_per_audio_s=None if per_audio is None else round(per_audio, 4),
            )

    def _add_energy(self, now: float, sample: DeviceSample | None) -> None:
        if sample is not None and sample.energy_j is not None:
            if self._counter is not None and sample.energy_j >= self._counter:
                self._energy_j = (self._energy_j or 0.0) + sample.energy_j - self._counter
            elif self._energy_j is None:
                self._energy_j = 0.0
            self._counter = sample.energy_j
            return
        power = sample.power_w if sample is not None else None
        if power is None:
            self._power = None
            return
        if self._energy_j is None:
            self._energy_j = 0.0
        if self._power is not None and now > self._power[0]:
            self._energy_j += (self._power[1] + power) / 2 * (now - self._power[0])
        self._power = (now, power)

    def _per_audio(self, now: float) -> float | None:
        history = self._history
        history.append((now, self._energy_j, self._audio_s))
        # Keep one entry at or before the window's start: the baseline the window counts from
        # (and none from before the first power reading, which could be no baseline).
        while len(history) > 1 and (
            history[1][0] <= now - self._window_s
            or (history[0][1] is None and self._energy_j is not None)
        ):
            history.popleft()
        _, energy_then, audio_then = history[0]
        audio = self._audio_s - audio_then
        if self._energy_j is None or energy_then is None or audio < _MIN_AUDIO_S:
            return None
        return (self._energy_j - energy_then) / audio


def start_telemetry(device: str, *, interval_s: float = 1.0) -> Telemetry:
    """Sampling started for a worker on `device` (`cpu`, `cuda:N`): always the process's CPU
    and memory; a Jetson's tegrastats when the machine has it (any device: the board's power
    is the figure there); NVML for a CUDA device elsewhere, when nvidia-ml-py and a driver
    are installed. A source that is missing is left out without an error."""
    source: DeviceSource | None = None
    program = find_tegrastats()
    if program is not None:
        source = TegrastatsSource.start(program, interval_ms=round(interval_s * 1000))
    elif device.startswith("cuda"):
        source = NvmlSource.open(device)
    telemetry = Telemetry(source, device_name=_device_name(device), interval_s=interval_s)
    if source is not None:
        log.info("telemetry: %s on %s", source.name, device)
    return telemetry.start()


def _device_name(device: str) -> str:
    from speechd.engine import device_name

    # torch is loaded in a worker that runs a CUDA model; the CPU's name needs no torch.
    return device_name(device, sys.modules.get("torch"))
