"""scripts/check_aarch64_wheels.py: what it checks (runtime dependencies and the Jetson
extras, torch left out), for which platforms, and that a dependency without an aarch64 wheel
fails it (against PyPI: slow tier). CI runs the check itself in scripts/test.sh."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_aarch64_wheels.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_aarch64_wheels", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_it_checks_the_runtime_tree_and_the_jetson_extras_without_torch() -> None:
    requirements = _script().runtime_requirements()
    names = {r.split(">")[0].split("=")[0].split("[")[0].lower() for r in requirements}
    assert "torch" not in names
    assert {"kokoro", "misaki", "msgspec", "av", "lameenc", "numpy"} <= names
    assert {"nats-py", "nvidia-ml-py", "onnxruntime"} <= names  # the nats, nvml, onnx extras
    assert "onnxruntime-gpu" not in names  # NVIDIA's wheel on a Jetson, not PyPI's
    assert not names & {"pytest", "matplotlib", "playwright"}  # test and loadtest extras


def test_the_targets_are_jetpack_6_and_7() -> None:
    jp6, jp7 = _script().TARGETS
    assert (jp6.python, jp6.abi, jp7.python, jp7.abi) == ("3.10", "cp310", "3.12", "cp312")
    assert (
        "manylinux_2_35_aarch64" in jp6.platforms and "manylinux_2_36_aarch64" not in jp6.platforms
    )
    assert "manylinux_2_39_aarch64" in jp7.platforms
    assert {"manylinux_2_17_aarch64", "manylinux2014_aarch64"} <= set(jp6.platforms)


def test_the_torch_stand_in_is_a_wheel_named_torch(tmp_path: Path) -> None:
    folder = _script()._stub_torch(tmp_path)
    [wheel] = folder.glob("torch-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(next(n for n in archive.namelist() if n.endswith("METADATA")))
    assert b"Name: torch" in metadata


@pytest.mark.slow
def test_a_dependency_without_an_aarch64_wheel_fails_the_check(tmp_path: Path) -> None:
    # langdetect is published as a source distribution only.
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--with", "langdetect", "--force"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "SPEECHD_CACHE": str(tmp_path)},
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2 and all("langdetect" in line for line in lines)
    assert "CPython 3.10" in lines[0] and "CPython 3.12" in lines[1]
    assert not list((tmp_path / "aarch64-wheels").glob("*.ok"))  # a failure is not cached
