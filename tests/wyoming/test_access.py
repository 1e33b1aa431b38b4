"""Who may use the Wyoming door, which has no authentication: a TCP client from outside
`--wyoming-allow` (by default loopback and the private ranges) is closed as it is accepted,
with one log line; and Wyoming's requests fill at most their share of the queue
(`--wyoming-queue-share` of `--max-queue`), so HTTP callers keep the rest."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from litestar.testing import AsyncTestClient
from wyoming.client import AsyncTcpClient, AsyncUnixClient
from wyoming.ping import Ping
from wyoming.tts import Synthesize

from speechd.api.app import create_app
from speechd.casts.schema import JOBS
from speechd.config import PRIVATE_NETWORKS, Settings, SettingsError, load_settings
from speechd.durable import Store
from speechd.limits import StreamSlots
from speechd.wyoming import WyomingDoor, wyoming_door
from tests.api._live import free_port
from tests.api.test_health import announce

from ._support import READ_S, served


@contextlib.asynccontextmanager
async def _tcp_door(like: WyomingDoor, host: str, **door: object) -> AsyncIterator[int]:
    """Another door over `like`'s service on `host` (a free port), started; its port."""
    port = free_port()
    opened = WyomingDoor(
        f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}",
        service=like.service,
        live=like.live,
        slots=StreamSlots(8, 8),
        default_voice="af_heart",
        voice_map={},
        **door,  # type: ignore[arg-type]
    )
    try:
        await opened.start()
        yield port
    finally:
        await opened.close()


async def _answers(host: str, port: int) -> bool:
    """Whether a client connecting from loopback gets its ping answered (else the server
    closed the connection unread)."""
    try:
        async with AsyncTcpClient(host, port) as client:
            await client.write_event(Ping(text="hello").event())
            event = await asyncio.wait_for(client.read_event(), READ_S)
    except ConnectionError:
        return False
    return event is not None and event.type == "pong"


def test_the_allow_list_is_checked_with_the_settings() -> None:
    assert load_settings({}, environ={}).wyoming_allow == "private"
    allowed = load_settings({}, environ={"SPEECHD_WYOMING_ALLOW": "private, 100.64.0.0/10"})
    assert allowed.wyoming_allow == "private, 100.64.0.0/10"
    for bad in ("", "192.168.1.0/33", "home", "10.0.0.0/8,,nope"):
        with pytest.raises(SettingsError, match="--wyoming-allow / SPEECHD_WYOMING_ALLOW"):
            load_settings({"wyoming_allow": bad}, environ={})
    assert ipaddress.ip_network("fd12:3456::/48").subnet_of(PRIVATE_NETWORKS[6])  # type: ignore[arg-type]
    for share in ("0", "1.5"):
        with pytest.raises(SettingsError, match="--wyoming-queue-share"):
            load_settings({"wyoming_queue_share": share}, environ={})


async def test_a_client_outside_the_allowed_networks_is_closed_unread(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    outside = (ipaddress.ip_network("10.0.0.0/8"),)  # loopback is not in it
    async with served(store, tmp_path, worker=False) as running:
        async with _tcp_door(running.door, "127.0.0.1") as port:
            assert await _answers("127.0.0.1", port)  # the default: loopback and private
        with caplog.at_level(logging.WARNING, logger="speechd.wyoming"):
            async with _tcp_door(running.door, "127.0.0.1", allow=outside) as port:
                for _ in range(3):
                    assert not await _answers("127.0.0.1", port)
                # A unix socket's clients are the file's permissions' to judge.
                async with AsyncUnixClient(str(running.path)) as local:
                    await local.write_event(Ping().event())
                    pong = await asyncio.wait_for(local.read_event(), READ_S)
                    assert pong is not None and pong.type == "pong"
        refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
        # One line for the three (at most one a minute), naming the flag.
        assert refused == ["refused 1 Wyoming connection(s) from addresses outside --wyoming-allow"]


async def test_an_ipv6_client_is_judged_by_its_address(store: Store, tmp_path: Path) -> None:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    async with served(store, tmp_path, worker=False) as running:
        async with _tcp_door(running.door, "::1") as port:
            assert await _answers("::1", port)  # loopback, in the default
        only_ten = (ipaddress.ip_network("10.0.0.0/8"),)
        async with _tcp_door(running.door, "::1", allow=only_ten) as port:
            assert not await _answers("::1", port)


async def test_wyoming_fills_only_its_share_of_the_queue(
    store_dir: Path, store: Store, tmp_path: Path
) -> None:
    await announce(store)  # a worker that says it is ready, and makes nothing: casts wait
    path = tmp_path / "wyoming.sock"
    settings = Settings(data_dir=str(store_dir), max_queue=4, wyoming_uri=f"unix://{path}")
    async with (
        AsyncTestClient(create_app(settings)) as http,
        wyoming_door(settings) as door,
    ):
        waiting = []
        for n in range(2):  # half of --max-queue: taken, and waiting for their audio
            client = AsyncUnixClient(str(path))
            await client.connect()
            waiting.append(client)
            await client.write_event(Synthesize(text=f"Wyoming's cast number {n}.").event())
            await _until_jobs(store, n + 1)
        async with AsyncUnixClient(str(path)) as third:
            await third.write_event(Synthesize(text="One more from Wyoming.").event())
            refused = await asyncio.wait_for(third.read_event(), READ_S)
        assert refused is not None and refused.type == "error"
        assert refused.data["code"] == "queue_full"
        assert await store.check_tail(JOBS) == 2
        # HTTP callers have the rest of the queue.
        for n in range(2):
            made = await http.post("/v1/casts", json={"input": f"HTTP cast number {n}."})
            assert made.status_code == 201, made.text
        full = await http.post("/v1/casts", json={"input": "One more over HTTP."})
        assert full.status_code == 429 and full.json()["error"]["code"] == "queue_full"
        for client in waiting:
            await client.disconnect()
        door.close_s = 0.1  # the two waiting never get audio: no grace to wait out


async def _until_jobs(store: Store, n: int) -> None:
    deadline = asyncio.get_running_loop().time() + READ_S
    while await store.check_tail(JOBS) < n:
        assert asyncio.get_running_loop().time() < deadline, "the job never came"
        await asyncio.sleep(0.02)
