"""Per-client read rate limiting on the public read path (configured by `Settings`), and
the long-poll cap."""

from __future__ import annotations

import httpx
import pytest

from speechd.api.app import gateway_settings
from speechd.api.gateway import GatewaySettings
from speechd.api.gateway._limiter import ReadLimiter
from speechd.casts import CastState
from speechd.cli import build_parser
from speechd.config import Settings, SettingsError, load_settings
from speechd.durable import Store
from speechd.worker import Worker
from tests.api.gateway._support import StepEngine, serve, status_when, submit


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_token_bucket_refills_at_its_rate() -> None:
    clock = FakeClock()
    limiter = ReadLimiter(rate=2.0, burst=3, clock=clock)
    assert [limiter.take("a") for _ in range(3)] == [None, None, None]
    wait = limiter.take("a")
    assert wait is not None and 0.49 < wait <= 0.5
    assert limiter.take("b") is None  # clients are independent
    clock.now += 0.5
    assert limiter.take("a") is None
    assert limiter.take("a") is not None
    clock.now += 60
    assert [limiter.take("a") for _ in range(3)] == [None, None, None]  # capped at the burst
    assert limiter.take("a") is not None
    assert ReadLimiter.retry_after(0.01) == 1
    assert ReadLimiter.retry_after(2.2) == 3


def test_the_client_table_is_bounded() -> None:
    limiter = ReadLimiter(rate=1.0, burst=1, max_clients=10, clock=FakeClock())
    for i in range(1000):
        limiter.take(f"client-{i}")
    assert len(limiter._buckets) == 10


async def _a_cast(store: Store, url: str) -> str:
    async with httpx.AsyncClient(base_url=url) as http:
        cast_id = await submit(http, "One short cast.", response_format="wav")
    await status_when(store, cast_id, lambda s: s.state == CastState.DONE)
    return cast_id


async def test_reads_past_the_quota_get_429_with_retry_after(store: Store, worker: Worker) -> None:
    settings = Settings(data_dir="unused", read_rate=0.5, read_burst=3)
    async with serve(store, settings) as live, httpx.AsyncClient(base_url=live.url) as http:
        cast_id = await _a_cast(store, live.url)
        urls = [f"/v1/casts/{cast_id}", f"/v1/casts/{cast_id}/records", f"/c/{cast_id}"]
        assert [(await http.get(url)).status_code for url in urls] == [200, 200, 200]
        limited = await http.get(f"/v1/casts/{cast_id}/audio")
        assert limited.status_code == 429
        assert limited.headers["retry-after"] == "2"
        error = limited.json()["error"]
        assert (error["type"], error["code"]) == ("rate_limit_exceeded", "rate_limit_exceeded")
        # Unknown casts cost a read too: probing ids is not free.
        assert (await http.get("/v1/casts/AAAAAAAAAAAAAAAAAAAAAA")).status_code == 429
        # The pages' own files, the api's routes and writes are not reads of a cast.
        assert (await http.get("/static/player.js")).status_code == 200
        assert (await http.get("/")).status_code == 200
        assert (await http.get("/v1/audio/voices")).status_code == 200
        created = await http.post("/v1/casts", json={"input": "Something else."})
        assert created.status_code == 201


async def test_clients_behind_a_trusted_proxy_are_told_apart(store: Store, worker: Worker) -> None:
    settings = Settings(
        data_dir="unused", read_rate=0.1, read_burst=1, client_header="x-forwarded-for"
    )
    async with serve(store, settings) as live, httpx.AsyncClient(base_url=live.url) as http:
        url = f"/v1/casts/{await _a_cast(store, live.url)}"

        async def get(forwarded: str) -> int:
            headers = {"x-forwarded-for": forwarded}
            return (await http.get(url, headers=headers)).status_code

        assert await get("203.0.113.7") == 200
        # The proxy appends the address it saw; whatever the client wrote to the left of it
        # (here a made-up address, to get a fresh quota) changes nothing.
        assert await get("198.51.100.99, 203.0.113.7") == 429
        assert await get("198.51.100.1") == 200


async def test_without_a_trusted_header_forwarded_addresses_are_ignored(
    store: Store, worker: Worker
) -> None:
    settings = Settings(data_dir="unused", read_rate=0.1, read_burst=1)
    async with serve(store, settings) as live, httpx.AsyncClient(base_url=live.url) as http:
        url = f"/v1/casts/{await _a_cast(store, live.url)}"
        first = await http.get(url, headers={"x-forwarded-for": "203.0.113.7"})
        second = await http.get(url, headers={"x-forwarded-for": "198.51.100.1"})
        assert (first.status_code, second.status_code) == (200, 429)


def test_rate_limits_are_settings_flags_and_env() -> None:
    args = build_parser().parse_args(
        ["api", "--read-rate", "2.5", "--read-burst", "7", "--client-header", "x-real-ip"]
    )
    flags = {k: getattr(args, k) for k in ("read_rate", "read_burst", "client_header")}
    settings = load_settings(flags, {})
    assert gateway_settings(settings) == GatewaySettings(
        read_rate=2.5, read_burst=7, client_header="x-real-ip"
    )
    env = {"SPEECHD_READ_RATE": "0.5", "SPEECHD_READ_BURST": "3"}
    assert (load_settings({}, env).read_rate, load_settings({}, env).read_burst) == (0.5, 3)
    assert gateway_settings(load_settings({}, {})) == GatewaySettings()
    with pytest.raises(SettingsError, match="--read-rate / SPEECHD_READ_RATE"):
        load_settings({}, {"SPEECHD_READ_RATE": "0"})
    with pytest.raises(SettingsError, match="--read-burst / SPEECHD_READ_BURST"):
        load_settings({"read_burst": -1}, {})


async def test_long_polls_are_capped(store: Store, engine: StepEngine, worker: Worker) -> None:
    engine.hold()
    async with (
        serve(store, gateway=GatewaySettings(max_wait_s=0.2)) as live,
        httpx.AsyncClient(base_url=live.url) as http,
    ):
        cast_id = await submit(http, "A cast held before its first chunk.")
        tail = (await status_when(store, cast_id, lambda s: s.attempt == 1)).attempt + 1
        page = await http.get(f"/v1/casts/{cast_id}/records?seq_num={tail}&wait=3600")
        assert page.json() == {"records": [], "tail": tail}
