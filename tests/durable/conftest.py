"""Fixtures of the store conformance suite: every test here runs once per backend.

A backend is one entry in `BACKENDS`: a name, the pytest marks its tests carry (a backend that
needs a server marks them, e.g. `nats`), and `make_url(request, tmp_path)`, which returns the
URL of a fresh, empty store that `speechd.durable.open_store` (in this process or a spawned one)
opens. Three are here: the embedded store (a fresh data folder), and NATS JetStream on a server
configured as the manual recommends (`nats_server`) and on a stock one (`nats_stock_server`:
`nats-server -js` as it comes, with its 1 MiB messages and 1000-message batches), each a fresh
namespace deleted afterwards. The NATS backends' tests carry the `nats` mark, so they run with
--run-nats.

Tests use only the public surface (`open_store`, the `Store` methods, the errors), and reach
other processes only through the URL, so they run unchanged on the new backend. Behaviour that
belongs to one backend (the embedded store's wake sockets, its files) lives in
`test_embedded_*.py`, which asks for `embedded_url` instead.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.nats import drop_namespace, namespace_for
from speechd.durable import Store, open_store

from ._support import OpenHandle


@dataclass(frozen=True)
class Backend:
    name: str
    make_url: Callable[[pytest.FixtureRequest, Path], str]
    marks: tuple[pytest.MarkDecorator, ...] = ()


def _embedded_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return str(tmp_path / "store")


def _nats_url_on(fixture: str) -> Callable[[pytest.FixtureRequest, Path], str]:
    def make_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
        server = request.getfixturevalue(fixture)
        namespace = namespace_for(tmp_path.name)
        # Two shards, so every contract test also crosses JetStream streams.
        url = f"{server.url}/?namespace={namespace}&shards=2"
        request.addfinalizer(lambda: drop_namespace(server.url, namespace))
        return url

    return make_url


BACKENDS: dict[str, Backend] = {
    "embedded": Backend("embedded", _embedded_url),
    "nats": Backend("nats", _nats_url_on("nats_server"), marks=(pytest.mark.nats,)),
    "nats-stock": Backend(
        "nats-stock", _nats_url_on("nats_stock_server"), marks=(pytest.mark.nats,)
    ),
}


@pytest.fixture(params=[pytest.param(b.name, marks=b.marks, id=b.name) for b in BACKENDS.values()])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a fresh, empty store, once per backend."""
    return BACKENDS[request.param].make_url(request, tmp_path)


@pytest.fixture
def embedded_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh embedded store's URL (a data folder), for the embedded backend's own tests."""
    return BACKENDS["embedded"].make_url(request, tmp_path)


@pytest.fixture
async def open_handle(store_url: str) -> AsyncIterator[OpenHandle]:
    """Opens more handles on the same store (as another process would); all closed after."""
    handles: list[Store] = []

    async def open_one() -> Store:
        handle = await open_store(store_url)
        handles.append(handle)
        return handle

    yield open_one
    for handle in handles:
        await handle.close()


@pytest.fixture
async def store(open_handle: OpenHandle) -> Store:
    """An open handle on the backend's fresh store, closed after the test."""
    return await open_handle()
