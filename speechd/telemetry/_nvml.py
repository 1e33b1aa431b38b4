"""NVIDIA GPU telemetry through NVML (`nvidia-ml-py`, the `nvml` extra), for a CUDA worker.

NVML numbers GPUs by PCI bus, CUDA by speed unless CUDA_DEVICE_ORDER says otherwise, and
CUDA_VISIBLE_DEVICES renumbers them again, so the worker's `cuda:N` is found by its UUID when
torch is loaded in this process (the worker's case), else through CUDA_VISIBLE_DEVICES.
Each figure is read on its own: a GPU that does not report one (power on some boards, the
energy counter before Volta) leaves just that figure out.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import Any

from ._readings import DeviceSample

__all__ = ["NvmlSource"]

log = logging.getLogger("speechd.telemetry")


def _cuda_index(device: str) -> int:
    _, _, index = device.partition(":")
    return int(index) if index.isdigit() else 0


def _handle(nvml: Any, device: str) -> Any:
    index = _cuda_index(device)
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            uuid = str(torch.cuda.get_device_properties(index).uuid)
            uuid = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
            return nvml.nvmlDeviceGetHandleByUUID(uuid)
        except (AttributeError, RuntimeError, AssertionError, nvml.NVMLError):
            pass  # an old torch, or a UUID NVML does not know (MIG): by number below
    listed = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
    visible = [v.strip() for v in listed if v.strip()]
    if index < len(visible):
        if visible[index].isdigit():
            return nvml.nvmlDeviceGetHandleByIndex(int(visible[index]))
        return nvml.nvmlDeviceGetHandleByUUID(visible[index])
    return nvml.nvmlDeviceGetHandleByIndex(index)


class NvmlSource:
    """Reads one GPU's load, memory, power, energy and temperature (on the sampler thread)."""

    name = "nvml"

    def __init__(self, nvml: Any, handle: Any) -> None:
        self._nvml = nvml
        self._handle = handle
        self._pid = os.getpid()

    @classmethod
    def open(cls, device: str) -> NvmlSource | None:
        """The source for `device` (`cuda:N`); None without nvidia-ml-py, a driver or the GPU."""
        try:
            import pynvml
        except ImportError:
            return None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            log.info("NVML unavailable (%s): no GPU telemetry", exc)
            return None
        try:
            return cls(pynvml, _handle(pynvml, device))
        except pynvml.NVMLError as exc:
            log.info("NVML does not know %s (%s): no GPU telemetry", device, exc)
            pynvml.nvmlShutdown()
            return None

    def _read(self, call: str, *args: Any) -> Any:
        try:
            return getattr(self._nvml, call)(self._handle, *args)
        except self._nvml.NVMLError:
            return None

    def sample(self) -> DeviceSample:
        nvml = self._nvml
        util = self._read("nvmlDeviceGetUtilizationRates")
        memory = self._read("nvmlDeviceGetMemoryInfo")
        power_mw = self._read("nvmlDeviceGetPowerUsage")
        energy_mj = self._read("nvmlDeviceGetTotalEnergyConsumption")
        temp = self._read("nvmlDeviceGetTemperature", nvml.NVML_TEMPERATURE_GPU)
        mine = None
        for process in self._read("nvmlDeviceGetComputeRunningProcesses") or ():
            if process.pid == self._pid and process.usedGpuMemory is not None:
                mine = int(process.usedGpuMemory)
        return DeviceSample(
            gpu_percent=float(util.gpu) if util is not None else None,
            memory_used_bytes=int(memory.used) if memory is not None else None,
            memory_total_bytes=int(memory.total) if memory is not None else None,
            memory_kind="gpu" if memory is not None else "",
            process_gpu_memory_bytes=mine,
            power_w=power_mw / 1000 if power_mw is not None else None,
            power_rail="board" if power_mw is not None else "",
            temperatures_c={"gpu": float(temp)} if temp is not None else {},
            energy_j=energy_mj / 1000 if energy_mj is not None else None,
        )

    def close(self) -> None:
        with contextlib.suppress(self._nvml.NVMLError):
            self._nvml.nvmlShutdown()
