"""Behind a proxy (issue 14): the client is the address the trusted proxies appended, the
right end of the header, never what the client itself wrote into it."""

from __future__ import annotations

import httpx
import pytest

from speechd.api._clients import ClientAddress
from speechd.api.app import gateway_settings
from speechd.casts import CastState
from speechd.cli import build_parser
from speechd.config import Settings, load_settings
from speechd.durable import Store
from speechd.limits import MAX_CLIENT_KEY_CHARS
from speechd.worker import Worker
from tests.api.gateway._support import serve, status_when, submit


def key(header: str | None, values: list[str], peer: str = "10.0.0.9", proxies: int = 1) -> str:
    return ClientAddress(header, trusted_proxies=proxies).key(values, peer)


@pytest.mark.parametrize(
    ("values", "proxies", "client"),
    [
        (["203.0.113.7"], 1, "203.0.113.7"),
        # nginx's $proxy_add_x_forwarded_for: what the client sent, then the peer it saw.
        (["198.51.100.99, 203.0.113.7"], 1, "203.0.113.7"),
        (["1.1.1.1, 2.2.2.2, 3.3.3.3, 203.0.113.7"], 1, "203.0.113.7"),
        # Two proxies (a CDN, then nginx): the CDN's entry is the client.
        (["198.51.100.99, 203.0.113.7, 192.0.2.10"], 2, "203.0.113.7"),
        # Fewer entries than proxies: every entry came from a proxy; the leftmost is the client.
        (["203.0.113.7"], 3, "203.0.113.7"),
        # Several header lines read as one list, in order.
        (["198.51.100.99", "203.0.113.7"], 1, "203.0.113.7"),
        # Ports, brackets, spaces and IPv6 forms come back as the bare address.
        (["203.0.113.7:5123"], 1, "203.0.113.7"),
        (["[2001:db8::1]:443"], 1, "2001:db8::1"),
        (["  2001:DB8:0:0:0:0:0:1  "], 1, "2001:db8::1"),
        (["unknown"], 1, "unknown"),
    ],
)
def test_the_client_is_counted_from_the_right_end(
    values: list[str], proxies: int, client: str
) -> None:
    assert key("x-forwarded-for", values, proxies=proxies) == client


def test_without_the_header_the_client_is_the_peer() -> None:
    assert key(None, ["203.0.113.7"]) == "10.0.0.9"
    assert key("x-forwarded-for", []) == "10.0.0.9"  # around the proxy
    assert key("x-forwarded-for", ["  "]) == "10.0.0.9"
    assert ClientAddress().key([], None) == "unknown"


def test_forwarded_is_read_by_its_for_values() -> None:
    header = 'for=198.51.100.99;proto=http, for="[2001:db8::7]:4711";proto=https;by=_nginx'
    assert key("forwarded", [header]) == "2001:db8::7"
    assert key("Forwarded", ["for=203.0.113.7"]) == "203.0.113.7"
    assert key("forwarded", ["proto=https"]) == "10.0.0.9"  # no for=: the peer


def test_keys_are_bounded_whatever_the_header_holds() -> None:
    assert len(key("x-forwarded-for", ["x" * 10_000])) == MAX_CLIENT_KEY_CHARS
    assert key("x-forwarded-for", [",".join(["1.2.3.4"] * 5000) + ",203.0.113.7"]) == (
        "203.0.113.7"
    )
    with pytest.raises(ValueError):
        ClientAddress("x-forwarded-for", trusted_proxies=0)


def test_the_proxy_settings_are_flags() -> None:
    args = build_parser().parse_args(
        ["api", "--client-header", "x-forwarded-for", "--trusted-proxies", "2"]
    )
    flags = {k: getattr(args, k) for k in ("client_header", "trusted_proxies")}
    settings = load_settings(flags, {})
    gateway = gateway_settings(settings)
    assert (gateway.client_header, gateway.trusted_proxies) == ("x-forwarded-for", 2)
    env = {"SPEECHD_TRUSTED_PROXIES": "3", "SPEECHD_MAX_CLIENT_STREAMS": "5"}
    assert load_settings({}, env).trusted_proxies == 3
    assert load_settings({}, env).max_client_streams == 5


async def test_a_client_cannot_pick_its_own_quota_behind_two_proxies(
    store: Store, worker: Worker
) -> None:
    settings = Settings(
        data_dir="unused",
        read_rate=0.1,
        read_burst=1,
        client_header="x-forwarded-for",
        trusted_proxies=2,
    )
    async with serve(store, settings) as live, httpx.AsyncClient(base_url=live.url) as http:
        cast_id = await submit(http, "One short cast.")
        await status_when(store, cast_id, lambda s: s.state == CastState.DONE)

        async def read(forwarded: str) -> int:
            response = await http.get(
                f"/v1/casts/{cast_id}", headers={"x-forwarded-for": forwarded}
            )
            return response.status_code

        assert await read("203.0.113.7, 192.0.2.10") == 200
        # Made-up addresses on the left change nothing: the same client, out of quota.
        assert await read("198.51.100.1, 203.0.113.7, 192.0.2.10") == 429
        assert await read("198.51.100.2, 198.51.100.3, 203.0.113.7, 192.0.2.10") == 429
        # Another client behind the same two proxies has its own quota.
        assert await read("203.0.113.8, 192.0.2.10") == 200
