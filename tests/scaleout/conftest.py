"""Fixtures for many processes on one NATS store: a fresh store namespace per test on the
session's server (`nats_server`), its JetStream streams deleted afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.nats import NatsServer, drop_namespace, namespace_for


@pytest.fixture
def nats_url(nats_server: NatsServer, tmp_path: Path) -> Iterator[str]:
    namespace = namespace_for(tmp_path.name)
    yield f"{nats_server.url}/?namespace={namespace}"
    drop_namespace(nats_server.url, namespace)
