"""Fixtures for the Wyoming tests: `store_dir` -> `store` (embedded, in a temp folder)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from speechd.durable import EmbeddedStore, Store


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
async def store(store_dir: Path) -> AsyncIterator[Store]:
    opened = await EmbeddedStore.open(store_dir)
    yield opened
    await opened.close()
