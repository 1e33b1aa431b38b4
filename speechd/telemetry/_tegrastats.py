"""Jetson telemetry: a long-running `tegrastats` and a parser for the lines it prints.

NVML does not cover a Jetson's integrated GPU; `tegrastats` (in every L4T release) prints one
line per interval with RAM, per-core CPU load, the GPU's load (`GR3D_FREQ`), temperatures and
the power rails of the board's monitors. The formats differ by release and module:

    JetPack 5 (L4T r35), Orin NX / Orin Nano:
      RAM 3271/15389MB (lfb 2489x4MB) SWAP 0/7694MB (cached 0MB) CPU [1%@729,...]
      EMC_FREQ 0%@3199 GR3D_FREQ 0%@[0] ... CPU@45.875C ... GPU@-256C tj@45.875C ...
      VDD_IN 5368mW/5368mW VDD_CPU_GPU_CV 1081mW/1081mW VDD_SOC 1448mW/1448mW
    JetPack 6 (L4T r36): a date and time first, lower-case sensor names, no EMC_FREQ unless
      run as root, `GR3D_FREQ 99%` with or without `@[freq,...]`
    AGX Orin: no VDD_IN; rails VDD_GPU_SOC, VDD_CPU_CV, VIN_SYS_5V0, VDDQ_VDD2_1V8AO (and
      unconnected `NC` channels)
    JetPack 4 (Nano, TX2, Xavier): rails without units, `POM_5V_IN 1314/1314`

A rail is `NAME current/average` in mW; a temperature `name@T C`, where -256 means the sensor
is off (a power-gated GPU reads so while idle). Device power is the module's input rail
(`VDD_IN`, `POM_5V_IN`) where there is one, else the sum of the rails listed. Every pattern
below is bounded and has no nested repetition; a line is cut at 4 KiB before it is parsed.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from ._readings import DeviceSample

__all__ = ["TegraLine", "TegrastatsSource", "find_tegrastats", "parse_tegrastats"]

log = logging.getLogger("speechd.telemetry")

_MAX_LINE = 4096
_RAM = re.compile(r"\bRAM (\d{1,9})/(\d{1,9})MB")
_GR3D = re.compile(r"\bGR3D_FREQ (\d{1,3})%(?:@\[?(\d{1,6}))?")
_CPU = re.compile(r"\bCPU \[([0-9%@,offOF ]{0,1024})\]")
_TEMP = re.compile(r"(?<![\w@])([A-Za-z][A-Za-z0-9_]{0,31})@(-?\d{1,4}(?:\.\d{1,6})?)C\b")
_RAIL_MW = re.compile(r"\b([A-Z][A-Z0-9_]{1,47}) (\d{1,7})mW/(\d{1,7})mW")
_RAIL_JP4 = re.compile(r"\b((?:POM|VDD)_[A-Z0-9_]{1,44}) (\d{1,7})/(\d{1,7})\b")
#: Input rails: the whole module's power, where the board measures it.
_INPUT_RAILS = ("VDD_IN", "POM_5V_IN")
_ABSENT_C = -256.0


@dataclass(frozen=True)
class TegraLine:
    """One tegrastats line, parsed. Rails in mW (current, average), temperatures in C."""

    ram_used_mb: int | None = None
    ram_total_mb: int | None = None
    cpu_percent: tuple[float | None, ...] = ()
    """Per core; None for a core that is off."""
    gpu_percent: float | None = None
    gpu_mhz: int | None = None
    temperatures_c: dict[str, float] = field(default_factory=dict)
    rails_mw: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def power_rail(self) -> str:
        """What `power_w` measures: an input rail's name, "rails" (their sum) or ""."""
        for name in _INPUT_RAILS:
            if name in self.rails_mw:
                return name
        return "rails" if self.rails_mw else ""

    @property
    def power_w(self) -> float | None:
        """The module's power now (watts), or None when the line lists no rail."""
        rail = self.power_rail
        if not rail:
            return None
        if rail != "rails":
            return self.rails_mw[rail][0] / 1000
        return sum(now for now, _ in self.rails_mw.values()) / 1000

    def sample(self) -> DeviceSample:
        memory = self.ram_used_mb is not None and self.ram_total_mb is not None
        return DeviceSample(
            gpu_percent=self.gpu_percent,
            memory_used_bytes=self.ram_used_mb * 2**20 if memory and self.ram_used_mb else None,
            memory_total_bytes=self.ram_total_mb * 2**20 if memory and self.ram_total_mb else None,
            memory_kind="shared" if memory else "",
            power_w=self.power_w,
            power_rail=self.power_rail,
            rails_w={name: now / 1000 for name, (now, _) in self.rails_mw.items()},
            temperatures_c=dict(self.temperatures_c),
        )


def parse_tegrastats(line: str) -> TegraLine:
    """The figures in one line of `tegrastats` output (any release above); fields it lacks
    stay empty, and a line that is not tegrastats' parses to an empty `TegraLine`."""
    line = line[:_MAX_LINE]
    ram = _RAM.search(line)
    gr3d = _GR3D.search(line)
    cpu = _CPU.search(line)
    cores: list[float | None] = []
    if cpu:
        for core in cpu.group(1).split(","):
            load = core.strip().partition("%")[0]
            cores.append(float(load) if load.isdigit() else None)
    temps: dict[str, float] = {}
    for match in _TEMP.finditer(line):
        value = float(match.group(2))
        if value > _ABSENT_C:
            temps[match.group(1)] = value
    rails: dict[str, tuple[int, int]] = {}
    for pattern in (_RAIL_MW, _RAIL_JP4):
        for match in pattern.finditer(line):
            name = match.group(1)
            # "NC": a monitor channel with nothing connected; the *_FREQ figures are no rails.
            if name != "NC" and not name.endswith("_FREQ"):
                rails.setdefault(name, (int(match.group(2)), int(match.group(3))))
    return TegraLine(
        ram_used_mb=int(ram.group(1)) if ram else None,
        ram_total_mb=int(ram.group(2)) if ram else None,
        cpu_percent=tuple(cores),
        gpu_percent=float(gr3d.group(1)) if gr3d else None,
        gpu_mhz=int(gr3d.group(2)) if gr3d and gr3d.group(2) else None,
        temperatures_c=temps,
        rails_mw=rails,
    )


def find_tegrastats() -> str | None:
    """The tegrastats program, if this machine is a Jetson that has one."""
    return shutil.which("tegrastats") or shutil.which("tegrastats", path="/usr/bin:/usr/sbin")


class TegrastatsSource:
    """Runs `command` (tegrastats, printing a line every `interval_ms`) for as long as the
    worker lives, and keeps the figures of its latest line; read by the sampler thread.

    If the worker dies without `close`, tegrastats' next write to the closed pipe ends it
    (SIGPIPE), so it outlives the worker by one interval at most.
    """

    name = "tegrastats"

    def __init__(self, command: Sequence[str]) -> None:
        self._lock = threading.Lock()
        self._latest: TegraLine | None = None
        self._process = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            errors="replace",
            bufsize=1,
        )
        self._reader = threading.Thread(target=self._read, name="speechd-tegrastats", daemon=True)
        self._reader.start()

    @classmethod
    def start(cls, program: str, *, interval_ms: int = 1000) -> TegrastatsSource | None:
        try:
            return cls([program, "--interval", str(interval_ms)])
        except OSError as exc:
            log.warning("tegrastats could not be started (%s): no Jetson telemetry", exc)
            return None

    def _read(self) -> None:
        assert self._process.stdout is not None
        for raw in self._process.stdout:
            parsed = parse_tegrastats(raw)
            if parsed.rails_mw or parsed.gpu_percent is not None:
                with self._lock:
                    self._latest = parsed

    def sample(self) -> DeviceSample | None:
        with self._lock:
            latest = self._latest
        return latest.sample() if latest is not None else None

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._reader.join(timeout=2)  # it ends at the pipe's end, before the pipe is closed
        if self._process.stdout is not None and not self._reader.is_alive():
            self._process.stdout.close()
