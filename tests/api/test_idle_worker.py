"""What the api says about a worker whose model is away (`--idle-unload`) or that left its
device for the CPU, read from the workers' notices as a worker writes them (here by hand, so
each state can be held still): /readyz stays 200 and says so, a cast waiting for its first
audio says `loading` and when it should start, /metrics and `speechd top` show the figures.
The worker's side (giving the model back, waking it) is tested in tests/worker."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import msgspec
from prometheus_client.parser import text_string_to_metric_families

from speechd.api.app import create_app
from speechd.config import Settings
from speechd.durable import Store
from speechd.telemetry import ModelReadings, Readings
from speechd.telemetry._top import parse_metrics, render_top
from tests.api.test_health import announce

GIB = 1 << 30


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found.setdefault(s.name, []).append((s.labels, s.value))
    return found


@asynccontextmanager
async def served(
    settings: Settings, clock: Callable[[], float] = time.time
) -> AsyncIterator[httpx.AsyncClient]:
    """The app on this event loop, on `clock`, so a test writes notices while it serves."""
    app = create_app(settings, clock=clock)
    async with app.lifespan():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            yield client


async def _top(http: httpx.AsyncClient) -> str:
    """`speechd top`'s frame of the api's /metrics now."""
    text = (await http.get("/metrics")).text
    return render_top(parse_metrics(text), url="x", at=0, interval_s=2)


class Clock:
    """The api's clock, moved on by hand past its one-second cache of the workers."""

    def __init__(self) -> None:
        self.shift = 0.0

    def __call__(self) -> float:
        return time.time() + self.shift

    def ms(self) -> int:
        return round(self() * 1000)


async def test_an_idle_worker_stays_ready_and_a_cast_says_loading_until_its_model_is_back(
    store: Store, store_dir: Path
) -> None:
    clock = Clock()
    idle = ModelReadings(
        resident=False,
        since_ms=clock.ms() - 60_000,
        load_s=4.0,
        unloads=1,
        rss_held_bytes=GIB,
        rss_unloaded_bytes=GIB // 2,
        device_budget_bytes=2 * GIB,
    )
    await announce(store, device="cpu")
    beat = {"kind": "heartbeat", "device": "cpu"}
    await announce(store, **beat, state="idle", telemetry=Readings(model=idle))
    settings = Settings(data_dir=str(store_dir), max_queue=8)
    async with served(settings, clock) as http:
        ready = await http.get("/readyz")
        assert ready.status_code == 200
        body = ready.json()
        assert body["status"] == "ready" and body["model"] == "idle"
        assert body["devices"]["w1"] == {"device": "cpu", "name": "", "state": "idle"}
        assert (await http.get("/v1/audio/voices")).json()["voices"]  # voices stay listed

        created = await http.post("/v1/casts", json={"input": "Wake up, please."})
        assert created.status_code == 201, created.text
        url = f"/v1/casts/{created.json()['id']}"
        view = (await http.get(url)).json()
        assert view["status"] == "loading"
        assert view["progress"]["starts_in_seconds"] == 4.0  # the whole measured load

        clock.shift += 2.0  # past the workers' cache; the wake began 1 s ago
        waking = msgspec.structs.replace(idle, resident=True, since_ms=clock.ms() - 1000)
        await announce(store, **beat, state="waking", telemetry=Readings(model=waking))
        view = (await http.get(url)).json()
        assert view["status"] == "loading"
        assert 2.5 <= view["progress"]["starts_in_seconds"] <= 3.0  # what is left of it
        assert (await http.get("/readyz")).json()["model"] == "waking"

        found = _samples((await http.get("/metrics")).text)
        assert found["speechd_worker_model_state"] == [({"worker": "w1", "state": "waking"}, 1.0)]
        assert found["speechd_worker_model_load_seconds"] == [({"worker": "w1"}, 4.0)]
        assert found["speechd_worker_unloaded_resident_memory_bytes"] == [
            ({"worker": "w1"}, GIB / 2)
        ]
        assert found["speechd_worker_model_unloads_total"] == [({"worker": "w1"}, 1.0)]
        assert found["speechd_worker_device_memory_budget_bytes"] == [({"worker": "w1"}, 2 * GIB)]
        assert "speechd_worker_device_fallback" not in found
        top = await _top(http)
        assert "waking" in top and "/2.00 GiB" in top

        clock.shift += 2.0
        woken = msgspec.structs.replace(waking, wakes=1, wake_s=4.1, since_ms=clock.ms())
        await announce(store, **beat, telemetry=Readings(model=woken))
        view = (await http.get(url)).json()
        assert view["status"] == "queued"  # held again: back in line as any cast
        assert (await http.get("/readyz")).json()["model"] == "resident"
        await asyncio.sleep(1.05)  # /metrics reads the store at most once a second
        top = await _top(http)
        assert "resident wake 4.1 s" in top


async def test_a_worker_that_left_its_device_says_why_in_readyz_and_metrics(
    store: Store, settings: Settings
) -> None:
    why = "cuda:0 predicts durations 27% shorter than the CPU for a fixed sentence"
    await announce(store, device="cpu", fallback=why)
    async with served(settings) as http:
        body = (await http.get("/readyz")).json()
        assert body["model"] == "resident"
        assert body["devices"]["w1"] == {
            "device": "cpu",
            "name": "",
            "state": "resident",
            "fallback": why,
        }
        found = _samples((await http.get("/metrics")).text)
        top = await _top(http)
    assert found["speechd_worker_device_fallback"] == [({"worker": "w1"}, 1.0)]
    assert found["speechd_worker_model_state"] == [({"worker": "w1", "state": "resident"}, 1.0)]
    assert "(fallback) cpu" in top
