"""Fixtures for the api tests, chained from real resources in temp folders:
`store_dir` -> `store` -> `worker` (a fake worker task on that store) -> `client` (an
`AsyncTestClient` on `create_app`), and `server` (a live `speechd api` process on loopback)
with `worker_process` (the fake worker as its own process)."""

from __future__ import annotations

from tests.api import _shims

_shims.install()

from collections.abc import AsyncIterator, Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from litestar.testing import AsyncTestClient  # noqa: E402

from speechd.app import create_app  # noqa: E402
from speechd.config import Settings  # noqa: E402
from speechd.durable import EmbeddedStore, Store  # noqa: E402
from tests.api._fakes import FakeWorker, running_fake_worker  # noqa: E402
from tests.api._live import LiveServer, start_fake_worker, start_server  # noqa: E402


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
async def store(store_dir: Path) -> AsyncIterator[Store]:
    opened = await EmbeddedStore.open(store_dir)
    yield opened
    await opened.close()


@pytest.fixture
def settings(store_dir: Path) -> Settings:
    return Settings(data_dir=str(store_dir), max_queue=8)


@pytest.fixture
def worker(store_dir: Path) -> Iterator[FakeWorker]:
    with running_fake_worker(store_dir) as fake:
        yield fake


@pytest.fixture
async def client(settings: Settings, worker: FakeWorker) -> AsyncIterator[AsyncTestClient]:
    # The app opens its own store on the same folder: AsyncTestClient runs it on another
    # event loop (in a portal thread), and a store belongs to the loop that opened it.
    app = create_app(settings)
    async with AsyncTestClient(app, base_url="http://testserver.local") as test_client:
        yield test_client


@pytest.fixture
def worker_process(store_dir: Path) -> Iterator[None]:
    with start_fake_worker(store_dir, chunk_delay=0.05):
        yield


@pytest.fixture
def server(store_dir: Path, worker_process: None) -> Iterator[LiveServer]:
    with start_server(["api", "--data-dir", str(store_dir), "--max-queue", "64"]) as live:
        yield live
