"""Per-client read rate limiting on the public read path."""

from __future__ import annotations

import httpx
from gateway_support import asgi_client, make_app, make_gateway, new_cast

from speechd.durable import Store
from speechd.gateway import ReadLimiter


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


async def test_reads_past_the_quota_get_429_with_retry_after(store: Store) -> None:
    cast = await new_cast(store, ["One."])
    gateway = make_gateway(store, read_rate=0.5, read_burst=3)
    async with asgi_client(make_app(gateway)) as client:
        urls = [f"/v1/casts/{cast.id}", f"/v1/casts/{cast.id}/records", f"/c/{cast.id}"]
        assert [(await client.get(url)).status_code for url in urls] == [200, 200, 200]
        limited = await client.get(f"/v1/casts/{cast.id}/audio")
        assert limited.status_code == 429
        assert limited.headers["retry-after"] == "2"
        error = limited.json()["error"]
        assert error["type"] == "rate_limit_exceeded"
        # Unknown casts cost a read too: probing ids is not free.
        assert (await client.get("/v1/casts/AAAAAAAAAAAAAAAAAAAAAA")).status_code == 429
        # The pages' own files and writes are not reads of a cast.
        assert (await client.get("/static/player.js")).status_code == 200
        assert (await client.get("/")).status_code == 200
        created = await client.post("/v1/casts", json={"input": "Something else."})
        assert created.status_code == 201
    await gateway.close()


async def test_clients_behind_a_trusted_proxy_are_told_apart(store: Store) -> None:
    cast = await new_cast(store, ["One."])
    gateway = make_gateway(store, read_rate=0.1, read_burst=1, client_header="x-forwarded-for")
    async with asgi_client(make_app(gateway)) as client:
        url = f"/v1/casts/{cast.id}"

        async def get(forwarded: str) -> int:
            headers = {"x-forwarded-for": forwarded}
            return (await client.get(url, headers=headers)).status_code

        assert await get("203.0.113.7") == 200
        assert await get("203.0.113.7, 10.0.0.1") == 429
        assert await get("198.51.100.1") == 200
    await gateway.close()


async def test_without_a_trusted_header_forwarded_addresses_are_ignored(store: Store) -> None:
    cast = await new_cast(store, ["One."])
    gateway = make_gateway(store, read_rate=0.1, read_burst=1)
    async with asgi_client(make_app(gateway)) as client:
        url = f"/v1/casts/{cast.id}"
        first = await client.get(url, headers={"x-forwarded-for": "203.0.113.7"})
        second = await client.get(url, headers={"x-forwarded-for": "198.51.100.1"})
        assert (first.status_code, second.status_code) == (200, 429)
    await gateway.close()


async def test_long_polls_are_capped(store: Store, client: httpx.AsyncClient) -> None:
    cast = await new_cast(store, ["One."])
    gateway = make_gateway(store, max_wait_s=0.2)
    async with asgi_client(make_app(gateway)) as capped:
        page = await capped.get(f"/v1/casts/{cast.id}/records?seq_num=1&wait=3600")
        assert page.json() == {"records": [], "tail": 1}
    await gateway.close()
