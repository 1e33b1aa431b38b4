"""Telemetry end to end: a real worker (engine test double) whose sampler reads a stand-in
device carries its readings in its notices, and the api's /metrics shows them per worker;
without a device source only the CPU figures show. Plus the surface of speechd.telemetry."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import types
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from litestar.testing import AsyncTestClient
from prometheus_client.parser import text_string_to_metric_families

import speechd.telemetry as telemetry_package
from harness.engines import GPU_CURVE, CostEngine
from speechd.api.app import create_app
from speechd.config import Settings
from speechd.durable import open_store
from speechd.telemetry import Telemetry
from speechd.worker._batching import BatchCosts
from tests.telemetry._support import WORKER, Board, running_worker
from tests.worker._helpers import submit_text, wait_ended


async def _scrape(client: AsyncTestClient, want: str) -> dict[str, list[tuple[dict, float]]]:
    """/metrics as {sample name: [(labels, value)]}, once `want` is among them."""
    for _ in range(300):
        text = (await client.get("/metrics")).text
        found: dict[str, list[tuple[dict, float]]] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                found.setdefault(s.name, []).append((s.labels, s.value))
        if want in found:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"{want} never showed in /metrics")


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[AsyncTestClient]:
    app = create_app(Settings(data_dir=str(tmp_path / "data")))
    async with AsyncTestClient(app, base_url="http://testserver.local") as test_client:
        yield test_client


async def test_a_jetson_workers_readings_show_per_worker(
    tmp_path: Path, client: AsyncTestClient
) -> None:
    telemetry = Telemetry(Board(), device_name="Orin", interval_s=0.05).start()
    with running_worker(tmp_path / "data", telemetry):
        response = await client.post("/v1/audio/speech", json={"input": "Power, please. " * 8})
        assert response.status_code == 200
        found = await _scrape(client, "speechd_worker_energy_per_audio_second_joules")
        ready = (await client.get("/readyz")).json()
    assert ready["devices"] == {
        WORKER: {"device": "cpu", "name": "Orin", "state": "resident", "max_batch": 1}
    }
    assert found["speechd_worker_info"] == [
        ({"worker": WORKER, "device": "cpu", "device_name": "Orin", "telemetry": "tegrastats"}, 1.0)
    ]
    one = {name: samples[0][1] for name, samples in found.items() if len(samples) == 1}
    assert one["speechd_device_gpu_utilization_percent"] == 99.0
    assert found["speechd_device_power_watts"] == [({"worker": WORKER, "rail": "VDD_IN"}, 9.911)]
    assert ({"worker": WORKER, "rail": "VDD_SOC"}, 2.163) in found[
        "speechd_device_rail_power_watts"
    ]
    assert ({"worker": WORKER, "sensor": "tj"}, 59.6) in found["speechd_device_temperature_celsius"]
    assert found["speechd_device_memory_used_bytes"] == [
        ({"worker": WORKER, "kind": "shared"}, float(5 << 30))
    ]
    assert one["speechd_worker_audio_made_seconds_total"] > 1
    assert one["speechd_worker_energy_joules_total"] > 0
    assert one["speechd_worker_energy_per_audio_second_joules"] > 0
    assert one["speechd_worker_resident_memory_bytes"] > 1 << 20
    assert one["speechd_worker_cpu_seconds_total"] > 0


async def test_without_a_device_source_only_cpu_figures_show(
    tmp_path: Path, client: AsyncTestClient
) -> None:
    with running_worker(tmp_path / "data", Telemetry(interval_s=0.05).start()):
        found = await _scrape(client, "speechd_worker_cpu_percent")
    assert found["speechd_worker_info"][0][0]["telemetry"] == "cpu"
    assert "speechd_worker_resident_memory_bytes" in found
    device = [n for n in found if n.startswith("speechd_device_") or "energy" in n]
    assert device == []


async def test_a_batching_worker_shows_its_batch_size_and_every_batch_it_ran(
    tmp_path: Path, client: AsyncTestClient
) -> None:
    engine = CostEngine(batch_curve=GPU_CURVE, rtf=0.05, overhead_s=0.05)
    telemetry = Telemetry(interval_s=0.05).start()
    with running_worker(tmp_path / "data", telemetry, engine, BatchCosts(GPU_CURVE, 16)):
        async with await open_store(str(tmp_path / "data")) as store:
            ids = [await submit_text(store, f"Cast {n} says a few words. " * 6) for n in range(4)]
            await wait_ended(store, ids, within=60)
        await asyncio.sleep(0.5)  # a heartbeat after the last batch
        found = await _scrape(client, "speechd_worker_batch_size_count")
        ready = (await client.get("/readyz")).json()
    assert engine.batches
    assert ready["devices"][WORKER]["max_batch"] == 16
    assert found["speechd_worker_max_batch"] == [({"worker": WORKER}, 16.0)]
    buckets = {s[0]["le"]: s[1] for s in found["speechd_worker_batch_size_bucket"]}
    steps = found["speechd_worker_batch_size_count"][0][1]
    assert buckets["+Inf"] == steps and buckets["1"] < steps  # some steps were batches
    assert found["speechd_worker_batch_size_sum"][0][1] > steps


async def test_the_decoder_graph_a_worker_speaks_with_shows_in_readyz_and_metrics(
    tmp_path: Path, client: AsyncTestClient
) -> None:
    engine = CostEngine(rtf=0.05, overhead_s=0.05)
    engine.graph = "int8"  # type: ignore[attr-defined]  # as ONNX Runtime's auto chose it
    with running_worker(tmp_path / "data", Telemetry(interval_s=0.05).start(), engine):
        found = await _scrape(client, "speechd_worker_graph_info")
        ready = (await client.get("/readyz")).json()
    assert ready["devices"][WORKER]["graph"] == "int8"
    assert found["speechd_worker_graph_info"] == [({"worker": WORKER, "graph": "int8"}, 1.0)]


async def test_no_worker_no_telemetry(client: AsyncTestClient) -> None:
    text = (await client.get("/metrics")).text
    assert "speechd_worker_info" not in text and "speechd_device_" not in text


def test_all_lists_exactly_the_public_names() -> None:
    public = {
        name
        for name, value in vars(telemetry_package).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name != "annotations"
    }
    assert set(telemetry_package.__all__) == public
    for name in telemetry_package.__all__:
        assert getattr(telemetry_package, name).__module__ == "speechd.telemetry", name


def test_importing_telemetry_loads_no_torch_nvml_or_http() -> None:
    code = (
        "import sys, speechd.telemetry, speechd.casts\n"
        "heavy = ('torch', 'pynvml', 'httpx', 'prometheus_client')\n"
        "heavy = [m for m in heavy if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
