"""Casts' own tests run on a real store: the embedded one, and NATS (`--run-nats`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from speechd.durable import Store
from tests.support.backends import BACKENDS, backend_store


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    async with backend_store(request, tmp_path) as opened:
        yield opened
