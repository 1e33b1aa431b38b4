"""Fixtures for the api tests, chained from real resources in temp folders:
`store_dir` -> `store` -> `worker` (the real worker, in this process, on that store and the
engine test double) -> `client` (an `AsyncTestClient` on `create_app`). `clock` shifts the
api's clock (a live input's idle timeout) without touching the store's timestamps."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from litestar.testing import AsyncTestClient

from harness.workers import running_worker
from speechd.api.app import create_app
from speechd.config import Settings
from speechd.worker import Worker


class Clock:
    """The api's clock: the real time plus `skew_s`."""

    def __init__(self) -> None:
        self.skew_s = 0.0

    def __call__(self) -> float:
        return time.time() + self.skew_s


@pytest.fixture
def settings(store_dir: Path) -> Settings:
    return Settings(data_dir=str(store_dir), max_queue=8)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def worker(store_dir: Path) -> Iterator[Worker]:
    with running_worker(store_dir) as running:
        yield running


@pytest.fixture
async def client(
    settings: Settings, worker: Worker, clock: Clock
) -> AsyncIterator[AsyncTestClient]:
    # The app opens its own store on the same folder: AsyncTestClient runs it on another
    # event loop (in a portal thread), and a store belongs to the loop that opened it.
    app = create_app(settings, clock=clock)
    async with AsyncTestClient(app, base_url="http://testserver.local") as test_client:
        yield test_client
