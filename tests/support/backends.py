"""A store on each backend, for the packages whose tests run on every one (casts, service):
the embedded store in a temp folder, or a namespace of the session's NATS server."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from speechd.durable import Store, open_store
from tests.nats_support import drop_namespace, namespace_for

__all__ = ["BACKENDS", "backend_store"]

BACKENDS = ["embedded", pytest.param("nats", marks=pytest.mark.nats)]
"""The `params` of a store fixture that runs its tests on every backend."""


@contextlib.asynccontextmanager
async def backend_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """The store of the backend `request.param` names, closed (and a NATS namespace dropped)
    on exit."""
    if request.param == "embedded":
        opened = await open_store(str(tmp_path / "data"))
        try:
            yield opened
        finally:
            await opened.close()
        return
    server = request.getfixturevalue("nats_server")
    namespace = namespace_for(tmp_path.name)
    opened = await open_store(f"{server.url}/?namespace={namespace}")
    try:
        yield opened
    finally:
        await opened.close()
        drop_namespace(server.url, namespace)
