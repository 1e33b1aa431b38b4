"""`/metrics` counts the receipts in `progress/done` as the worker trims it to a window: a
scrape whose place was trimmed away reads on from the first receipt kept."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from litestar.testing import AsyncTestClient

from speechd.api.app import create_app
from speechd.casts import schema
from speechd.config import Settings, load_settings
from speechd.durable import AppendRecord, Store


async def receipts(store: Store, count: int) -> None:
    for n in range(count):
        receipt = schema.Receipt(f"c{n}", 1, "w1", 2, 1000, 100, 10.0)
        await store.append(schema.PROGRESS_DONE, [AppendRecord(schema.encode(receipt))])


def completed(metrics: str) -> float:
    line = next(x for x in metrics.splitlines() if x.startswith("speechd_casts_completed_total"))
    return float(line.split()[-1])


async def test_metrics_read_on_past_trimmed_receipts(store_dir: Path, store: Store) -> None:
    await receipts(store, 10)
    await store.trim(schema.PROGRESS_DONE, 4)  # before the first scrape: six are there
    async with AsyncTestClient(create_app(Settings(data_dir=str(store_dir)))) as client:
        first = await client.get("/metrics")
        assert first.status_code == 200
        assert completed(first.text) == 6
        await receipts(store, 10)
        await store.trim(schema.PROGRESS_DONE, 15)  # past where the last scrape stopped
        # /metrics reads the store at most once a second: scrape until it has read again.
        deadline = time.monotonic() + 10
        while completed((second := await client.get("/metrics")).text) == 6:
            assert time.monotonic() < deadline, "the scrape never read the store again"
            await asyncio.sleep(0.1)
        assert second.status_code == 200
        assert completed(second.text) == 6 + 5  # what was kept of what came since


def test_the_receipts_window_is_a_setting() -> None:
    assert load_settings({}, {}).worker_config().receipts == 10_000  # WorkerConfig's default
    assert load_settings({"receipts": 50}, {}).receipts == 50
    assert load_settings({}, {"SPEECHD_RECEIPTS": "200"}).receipts == 200


def test_the_worker_gets_the_receipts_window() -> None:
    assert load_settings({"receipts": 64}, {}).worker_config().receipts == 64
