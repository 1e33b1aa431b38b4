"""The tegrastats parser on Orin Nano, Orin NX and AGX Orin lines (tests/telemetry/data; see
its header for where those lines come from), and a long-running tegrastats as the worker
runs it: a stand-in program that prints those lines."""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

import pytest

from speechd.telemetry import start_telemetry
from speechd.telemetry._tegrastats import TegrastatsSource, parse_tegrastats

DATA = Path(__file__).parent / "data" / "tegrastats.txt"


def _lines() -> dict[str, str]:
    found: dict[str, str] = {}
    heading = ""
    for line in DATA.read_text().splitlines():
        if line.startswith("## "):
            heading = line[3:]
        elif line and not line.startswith("#"):
            found[heading] = line
    return found


LINES = _lines()

# heading prefix -> (cores, cores off, GR3D %, GPU MHz, RAM used/total MB, power rail, watts)
EXPECTED = {
    "Orin Nano 8GB, JetPack 5.1.2": (6, 2, 0.0, 305, (2448, 7620), "VDD_IN", 4.883),
    "Orin Nano Super 8GB, JetPack 6.2 (L4T r36.4.3), idle": (
        6, 0, 0.0, None, (3021, 7620), "VDD_IN", 3.295
    ),
    "Orin Nano Super 8GB, JetPack 6.2 (L4T r36.4.3), generating": (
        6, 0, 99.0, None, (5512, 7620), "VDD_IN", 9.911
    ),
    "Orin NX 16GB, JetPack 5.1.2 (L4T r35.4.1), idle": (
        8, 0, 0.0, 0, (3271, 15389), "VDD_IN", 5.368
    ),
    "Orin NX 16GB, JetPack 5.1.2 (L4T r35.4.1), generating": (
        8, 0, 87.0, 918, (6105, 15389), "VDD_IN", 14.207
    ),
    # No input rail: the sum of the four connected rails (the NC channels left out).
    "AGX Orin 64GB, JetPack 5.1": (12, 0, 0.0, 0, (4722, 62780), "rails", 7.912),
    "AGX Orin 64GB, JetPack 6.0": (12, 0, 93.0, 1300, (11876, 62841), "rails", 28.76),
}  # fmt: skip


def test_the_data_has_every_board_and_release() -> None:
    assert len(LINES) == len(EXPECTED) == 7
    for prefix in EXPECTED:
        assert any(h.startswith(prefix) for h in LINES), prefix


@pytest.mark.parametrize("heading", sorted(LINES))
def test_each_board_parses(heading: str) -> None:
    [expected] = [v for k, v in EXPECTED.items() if heading.startswith(k)]
    cores, off, gpu, mhz, ram, rail, watts = expected
    line = parse_tegrastats(LINES[heading])
    assert len(line.cpu_percent) == cores
    assert sum(c is None for c in line.cpu_percent) == off
    assert line.gpu_percent == gpu
    assert line.gpu_mhz == mhz
    assert (line.ram_used_mb, line.ram_total_mb) == ram
    assert line.power_rail == rail
    assert line.power_w == pytest.approx(watts)
    # Sensors that are off (-256C) are left out; the rest are there, with their own names.
    assert line.temperatures_c and all(t > 0 for t in line.temperatures_c.values())
    assert "tj" in line.temperatures_c
    assert "NC" not in line.rails_mw and not any(r.endswith("_FREQ") for r in line.rails_mw)


def test_rails_and_sensors_by_name() -> None:
    busy = parse_tegrastats(LINES["Orin Nano Super 8GB, JetPack 6.2 (L4T r36.4.3), generating"])
    assert busy.rails_mw == {
        "VDD_IN": (9911, 7204),
        "VDD_CPU_GPU_CV": (4622, 2911),
        "VDD_SOC": (2163, 1872),
    }
    assert busy.temperatures_c["gpu"] == 59.593
    assert busy.cpu_percent[:2] == (38.0, 22.0)
    agx = parse_tegrastats(LINES["AGX Orin 64GB, JetPack 5.1 (L4T r35.2.1), idle"])
    assert set(agx.rails_mw) == {"VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO"}
    assert "GPU" not in agx.temperatures_c  # power-gated while idle: -256C
    assert agx.temperatures_c["Tboard"] == 33.0
    sample = busy.sample()
    assert sample.power_w == 9.911 and sample.power_rail == "VDD_IN"
    assert sample.memory_kind == "shared" and sample.memory_used_bytes == 5512 * 2**20
    assert sample.rails_w["VDD_CPU_GPU_CV"] == 4.622


def test_jetpack_4_rails_have_no_units() -> None:
    line = parse_tegrastats(
        "RAM 1216/3956MB (lfb 120x4MB) SWAP 0/1978MB (cached 0MB) CPU [6%@102,4%@102,0%@102,"
        "1%@102] EMC_FREQ 0% GR3D_FREQ 0% PLL@24C CPU@26.5C PMIC@100C GPU@25C AO@33.5C "
        "thermal@25.75C POM_5V_IN 1314/1314 POM_5V_GPU 0/0 POM_5V_CPU 159/159"
    )
    assert line.power_rail == "POM_5V_IN" and line.power_w == 1.314
    assert line.rails_mw["POM_5V_CPU"] == (159, 159)


@pytest.mark.parametrize(
    "junk", ["", "hello", "GR3D_FREQ lots", "VDD_IN many", "x" * 100_000, "RAM 1/2MB " * 2000]
)
def test_other_text_parses_to_nothing_or_to_what_it_has(junk: str) -> None:
    line = parse_tegrastats(junk)
    assert line.power_w is None and line.gpu_percent is None


def _fake_tegrastats(folder: Path) -> Path:
    """An executable `tegrastats` that prints the data's lines, one per --interval."""
    program = folder / "tegrastats"
    program.write_text(
        f"#!{sys.executable}\n"
        "import sys, time\n"
        "interval = int(sys.argv[sys.argv.index('--interval') + 1]) / 1000\n"
        f"lines = [l for l in open({str(DATA)!r}) if l.strip() and not l.startswith('#')]\n"
        "while True:\n"
        "    for line in lines:\n"
        "        print(line, end='', flush=True)\n"
        "        time.sleep(interval)\n"
    )
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return program


def _wait(predicate: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.02)
    raise AssertionError("timed out")


def test_a_long_running_tegrastats_feeds_the_latest_line(tmp_path: Path) -> None:
    source = TegrastatsSource.start(str(_fake_tegrastats(tmp_path)), interval_ms=20)
    assert source is not None
    try:
        _wait(lambda: source.sample() is not None)
        sample = source.sample()
        assert sample is not None and sample.power_w is not None and sample.power_w > 3
    finally:
        source.close()
    assert source._process.poll() is not None  # ended with the source


def test_on_a_jetson_the_worker_samples_tegrastats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_tegrastats(tmp_path)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    telemetry = start_telemetry("cpu", interval_s=0.05)  # a CPU worker on a Jetson too
    try:
        _wait(lambda: (telemetry.reading().energy_j or 0) > 0)
        telemetry.audio_made(2.0)
        _wait(lambda: telemetry.reading().energy_per_audio_s is not None)
        reading = telemetry.reading()
        assert reading.source == "tegrastats"
        assert reading.power_rail in ("VDD_IN", "rails") and reading.power_w
        assert reading.gpu_percent is not None and reading.temperatures_c
        assert reading.rss_bytes and reading.audio_s == 2.0
    finally:
        telemetry.close()


def test_a_tegrastats_that_cannot_start_leaves_the_device_out(tmp_path: Path) -> None:
    assert TegrastatsSource.start(str(tmp_path / "missing")) is None
