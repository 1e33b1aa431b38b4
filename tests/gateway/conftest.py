"""Fixtures for the gateway tests: a real embedded store in a temp dir, then a gateway, then
a client (in-process) or a live server (loopback), chained.

The in-process client is httpx over `ASGITransport`, which runs the app on the test's own
event loop (Litestar's `AsyncTestClient` runs it on a portal thread's loop, and the store is
bound to the loop that opened it)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from gateway_support import LiveServer, asgi_client, live_server, make_app, make_gateway

from speechd.durable import EmbeddedStore, Store
from speechd.gateway import Gateway


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    store = await EmbeddedStore.open(tmp_path / "data")
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def gateway(store: Store) -> AsyncIterator[Gateway]:
    gateway = make_gateway(store)
    try:
        yield gateway
    finally:
        await gateway.close()


@pytest.fixture
async def client(gateway: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(make_app(gateway)) as client:
        yield client


@pytest.fixture
async def server(gateway: Gateway) -> AsyncIterator[LiveServer]:
    async with live_server(make_app(gateway)) as live:
        yield live
