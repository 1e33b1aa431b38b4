from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from harness.nats import NatsServer, drop_namespace, namespace_for
from speechd.durable import Store, open_store


@pytest.fixture
async def stock_store(nats_stock_server: NatsServer, tmp_path: Path) -> AsyncIterator[Store]:
    """A store on a stock `nats-server -js` (1 MiB messages, 1000-message batches)."""
    namespace = namespace_for(tmp_path.name)
    opened = await open_store(f"{nats_stock_server.url}/?namespace={namespace}")
    try:
        yield opened
    finally:
        await opened.close()
        drop_namespace(nats_stock_server.url, namespace)
