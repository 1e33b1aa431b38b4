"""The container tier's fixtures: podman, the base image (made once), the cpu image (built
once a run, from the layer cache after the first), and model cache volumes holding the real
weights. Each image is built at most once a session and builds run one at a time.

Where podman or mmdebstrap is missing, CI fails (scripts/test.sh installs them) and a local
run skips, saying what to install."""

from __future__ import annotations

import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.podman import BASE_IMAGE, CPU_IMAGE, ROOT, Podman

from ._figures import record

TOOLS = ("podman", "runc", "buildah", "mmdebstrap")
_SPENT: dict[str, tuple[float, str]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each container test's wall time (its setup, builds included, its run and its teardown)
    among the tier's figures, so the tier's share of CI's time stays known."""
    if "container" not in report.keywords:
        return
    spent, outcome = _SPENT.get(report.nodeid, (0.0, "passed"))
    if report.when == "call" or not report.passed:
        outcome = report.outcome
    _SPENT[report.nodeid] = (spent + report.duration, outcome)
    if report.when == "teardown":
        spent, outcome = _SPENT.pop(report.nodeid)
        if outcome != "skipped":
            name = report.nodeid.rsplit("/", 1)[-1]
            record("test", f"{name} ({outcome})", f"{spent:.1f} s")


def _unavailable(message: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Podman:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        _unavailable(
            f"container tier: {', '.join(missing)} missing (apt-get install podman runc "
            "buildah mmdebstrap fuse-overlayfs slirp4netns uidmap)"
        )
    tool = Podman(tmp_path_factory.mktemp("podman"))
    started = time.monotonic()
    if tool.ensure_base():
        record("base", "made by mmdebstrap", f"{time.monotonic() - started:.1f} s")
    assert tool.exists(BASE_IMAGE)
    return tool


@pytest.fixture(scope="session")
def cpu_image(podman: Podman) -> str:
    seconds = podman.build(ROOT / "containers" / "cpu" / "Containerfile", CPU_IMAGE)
    record("cpu", "build (cached layers where there were some)", f"{seconds:.1f} s")
    return CPU_IMAGE


@pytest.fixture(scope="session")
def run_id() -> str:
    """A suffix for this run's container and volume names."""
    return secrets.token_hex(3)


@pytest.fixture(scope="session")
def models_volume(
    podman: Podman, cpu_image: str, model_dir: Path, run_id: str
) -> Iterator[Callable[[str], str]]:
    """Makes model cache volumes holding the real weights (`name` -> the volume's name, the
    same volume for the same name); all removed at the end of the run."""
    made: list[str] = []

    def make(name: str) -> str:
        volume = f"speechd-test-{name}-{run_id}"
        if volume not in made:
            podman.fill_models(volume, model_dir, cpu_image)
            made.append(volume)
        return volume

    yield make
    for volume in made:
        podman("volume", "rm", "-f", volume, check=False)


@pytest.fixture
def volume(podman: Podman, run_id: str) -> Iterator[Callable[[str], str]]:
    """Makes empty named volumes for one test, removed after it."""
    made: list[str] = []

    def make(name: str) -> str:
        volume = f"speechd-test-{name}-{run_id}"
        podman.volume(volume)
        made.append(volume)
        return volume

    yield make
    for name in made:
        podman("volume", "rm", "-f", name, check=False)
