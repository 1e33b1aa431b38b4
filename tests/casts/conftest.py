"""Casts' own tests run on a real store: the embedded one, and NATS (`--run-nats`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from speechd.durable import Store, open_store
from tests.nats_support import drop_namespace, namespace_for


@pytest.fixture(params=["embedded", pytest.param("nats", marks=pytest.mark.nats)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    if request.param == "embedded":
        opened = await open_store(str(tmp_path / "data"))
        yield opened
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
