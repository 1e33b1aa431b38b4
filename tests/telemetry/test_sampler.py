"""The worker's sampler: CPU use and RSS always; energy from a device's power or counter;
joules per audio second over the window; NVML, real (absent here) and a stand-in."""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import pytest

from speechd.telemetry import Readings, Telemetry, start_telemetry
from speechd.telemetry._nvml import NvmlSource
from speechd.telemetry._readings import DeviceSample


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Device:
    name = "fake"

    def __init__(self) -> None:
        self.next: DeviceSample | None = None
        self.closed = False

    def sample(self) -> DeviceSample | None:
        return self.next

    def close(self) -> None:
        self.closed = True


def _telemetry(device: Device | None = None) -> tuple[Telemetry, Clock, list[float]]:
    clock, cpu = Clock(), [10.0]
    telemetry = Telemetry(device, clock=clock, cpu=lambda: cpu[0], rss=lambda: 123 << 20)
    return telemetry, clock, cpu


def test_cpu_use_is_over_the_last_interval_in_percent_of_one_core() -> None:
    telemetry, clock, cpu = _telemetry()
    telemetry.tick()
    assert telemetry.reading().cpu_percent is None  # one sample: no interval yet
    clock.now += 2.0
    cpu[0] += 3.0  # 1.5 cores busy
    telemetry.tick()
    reading = telemetry.reading()
    assert reading.cpu_percent == 150.0 and reading.cpu_seconds == 13.0
    assert reading.rss_bytes == 123 << 20
    assert reading.source == "" and reading.power_w is None and reading.energy_j is None


def test_power_integrates_to_energy_and_a_gap_breaks_the_sum() -> None:
    device = Device()
    telemetry, clock, _ = _telemetry(device)
    for watts in (10.0, 20.0, None, 30.0, 30.0):
        device.next = DeviceSample(power_w=watts, power_rail="VDD_IN") if watts else None
        telemetry.tick()
        clock.now += 1.0
    # 10 -> 20 over 1 s: 15 J; the gap drops 20 -> 30; 30 -> 30 over 1 s: 30 J.
    assert telemetry.reading().energy_j == 45.0
    assert telemetry.reading().power_w == 30.0 and telemetry.reading().source == "fake"


def test_a_device_energy_counter_wins_over_integrating_power() -> None:
    device = Device()
    telemetry, clock, _ = _telemetry(device)
    for counter in (5000.0, 5012.5, 5020.0, 10.0, 14.0):  # the counter reset (driver reload)
        device.next = DeviceSample(power_w=999.0, energy_j=counter)
        telemetry.tick()
        clock.now += 1.0
    assert telemetry.reading().energy_j == 24.0  # 12.5 + 7.5, nothing for the reset, + 4


def test_energy_per_audio_second_is_over_the_window() -> None:
    device = Device()
    telemetry, clock, _ = _telemetry(device)
    device.next = DeviceSample(power_w=10.0)
    for second in range(120):
        if second >= 100:
            telemetry.audio_made(2.0)  # 2 s of audio per second for the last 20 s
        telemetry.tick()
        clock.now += 1.0
    # The last 60 s: 600 J of 10 W over 40 s of audio (idle seconds in the window count).
    assert telemetry.reading().energy_per_audio_s == pytest.approx(600 / 40, rel=0.05)
    assert telemetry.reading().audio_s == 40.0


def test_no_figure_without_audio_or_without_power() -> None:
    device = Device()
    telemetry, clock, _ = _telemetry(device)
    device.next = DeviceSample(power_w=10.0)
    for _ in range(5):
        telemetry.tick()
        clock.now += 1.0
    assert telemetry.reading().energy_per_audio_s is None  # no audio
    cpu_only, clock, _ = _telemetry()
    for _ in range(5):
        cpu_only.audio_made(3.0)
        cpu_only.tick()
        clock.now += 1.0
    assert cpu_only.reading().energy_per_audio_s is None  # no power reading
    assert cpu_only.reading().audio_s == 15.0


def test_a_source_that_fails_does_not_end_sampling(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(Device):
        def sample(self) -> DeviceSample | None:
            raise RuntimeError("sensor gone")

    broken = Broken()
    telemetry = Telemetry(broken, interval_s=0.01).start()
    telemetry.close()
    assert broken.closed
    assert "telemetry sample failed" in caplog.text
    assert isinstance(telemetry.reading(), Readings)


def test_without_nvml_and_tegrastats_a_cuda_worker_measures_its_cpu_only() -> None:
    # This machine has nvidia-ml-py but no NVIDIA driver, and no tegrastats.
    assert NvmlSource.open("cuda:0") is None
    telemetry = start_telemetry("cuda:0", interval_s=0.01)
    try:
        telemetry.tick()
        reading = telemetry.reading()
    finally:
        telemetry.close()
    assert reading.source == "" and reading.rss_bytes and reading.cpu_seconds > 0
    assert reading.gpu_percent is None and reading.power_w is None


def test_without_nvidia_ml_py_nvml_is_simply_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    assert NvmlSource.open("cuda:1") is None


class FakeNvml:
    """The calls NvmlSource makes, on one GPU whose board reports no power."""

    NVML_TEMPERATURE_GPU = 0

    class NVMLError(Exception):
        pass

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.shut = False

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        return SimpleNamespace(gpu=97, memory=40)

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        return SimpleNamespace(used=3 << 30, total=80 << 30, free=77 << 30)

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        raise self.NVMLError("Not Supported")

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        return 123_456_789  # mJ

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        return 61

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        return [
            SimpleNamespace(pid=1, usedGpuMemory=1 << 30),
            SimpleNamespace(pid=self.pid, usedGpuMemory=2 << 30),
        ]

    def nvmlShutdown(self) -> None:
        self.shut = True


def test_nvml_figures_and_one_it_lacks() -> None:
    import os

    nvml = FakeNvml(os.getpid())
    source = NvmlSource(nvml, handle=object())
    sample = source.sample()
    assert sample.gpu_percent == 97.0
    assert (sample.memory_used_bytes, sample.memory_total_bytes) == (3 << 30, 80 << 30)
    assert sample.memory_kind == "gpu" and sample.process_gpu_memory_bytes == 2 << 30
    assert sample.power_w is None and sample.power_rail == ""  # not supported: left out
    assert sample.energy_j == pytest.approx(123_456.789)
    assert sample.temperatures_c == {"gpu": 61.0}
    source.close()
    assert nvml.shut


def test_power_that_arrives_after_the_first_samples_still_gives_a_figure() -> None:
    device = Device()
    telemetry, clock, _ = _telemetry(device)
    for second in range(10):
        device.next = DeviceSample(power_w=5.0) if second >= 3 else None  # tegrastats starting
        telemetry.audio_made(1.0)
        telemetry.tick()
        clock.now += 1.0
    assert telemetry.reading().energy_per_audio_s == pytest.approx(5.0)
