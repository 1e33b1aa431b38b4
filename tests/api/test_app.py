"""How `create_app` runs what lives as long as the app: the worker supervisor (under
`speechd serve`) and the retention sweep."""

from __future__ import annotations

import asyncio
from pathlib import Path

from litestar.testing import AsyncTestClient

from speechd.api.app import create_app
from speechd.casts import schema
from speechd.config import Settings
from speechd.durable import Store
from speechd.worker import Worker


class RecordingSupervisor:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.restarts = 2

    @property
    def alive(self) -> bool:
        return self.calls == ["start"]

    def start(self) -> None:
        self.calls.append("start")

    def stop(self, timeout: float) -> None:
        self.calls.append(f"stop {timeout}")


async def test_the_supervisor_runs_as_long_as_the_app(store_dir: Path) -> None:
    supervisor = RecordingSupervisor()
    settings = Settings(data_dir=str(store_dir), shutdown_timeout=7.5)
    app = create_app(settings, supervisor=supervisor)
    assert supervisor.calls == []
    async with AsyncTestClient(app) as client:
        assert supervisor.calls == ["start"]
        metrics = (await client.get("/metrics")).text
        assert "speechd_worker_restarts_total 2.0" in metrics
        assert "speechd_worker_alive 1.0" in metrics
    assert supervisor.calls == ["start", "stop 7.5"]


async def test_retention_removes_casts_nobody_touched(
    store_dir: Path, store: Store, worker: Worker
) -> None:
    settings = Settings(data_dir=str(store_dir), retention=0.5)
    async with AsyncTestClient(create_app(settings)) as client:
        response = await client.post("/v1/audio/speech", json={"input": "Short-lived."})
        cast_id = response.headers["x-cast-id"]
        assert await store.check_tail(schema.cast_stream(cast_id)) > 0
        streams = (schema.cast_stream(cast_id), schema.catalog_stream(cast_id))
        for _ in range(100):  # swept within a few sweep intervals of going quiet, together
            if not any([await store.check_tail(stream) for stream in streams]):
                break
            await asyncio.sleep(0.1)
        assert await store.check_tail(schema.cast_stream(cast_id)) == 0
        assert await store.check_tail(schema.catalog_stream(cast_id)) == 0
        # The same request makes the cast afresh.
        again = await client.post("/v1/audio/speech", json={"input": "Short-lived."})
        assert again.status_code == 200 and again.headers["x-cast-id"] == cast_id
