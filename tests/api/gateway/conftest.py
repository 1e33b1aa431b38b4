"""Fixtures for the gateway tests, chained from real parts: `store` (an embedded store in a
temp dir) -> `engine` (the cost model at the test's pace) -> `worker` (the real worker loop
on the store) -> `server` (`create_app` on loopback, open, default settings) -> `http` (a
client of it). Tests that need other settings start their own with `serve(...)`. `browser`
is headless Chromium (browser tests only)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Browser

from speechd.durable import EmbeddedStore, Store
from speechd.worker import Worker
from tests.api.gateway._support import LiveServer, StepEngine, running_worker, serve
from tests.support.browser import launch_browser


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    store = await EmbeddedStore.open(tmp_path / "data")
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
def engine() -> StepEngine:
    return StepEngine()


@pytest.fixture
async def worker(store: Store, engine: StepEngine) -> AsyncIterator[Worker]:
    async with running_worker(store, engine) as worker:
        yield worker


@pytest.fixture
async def server(store: Store, worker: Worker) -> AsyncIterator[LiveServer]:
    async with serve(store) as live:
        yield live


@pytest.fixture
async def http(server: LiveServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        yield client


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with launch_browser() as browser:
        yield browser
