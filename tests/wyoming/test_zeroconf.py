"""`--wyoming-zeroconf`: the door is advertised as `_wyoming._tcp.local.` while it serves and
withdrawn when it stops, found by a python-zeroconf browser as Home Assistant's finds it; a
name taken on the network is numbered, one zeroconf refuses leaves the server serving,
undiscovered. Everything stays on the loopback interface (the door listens on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import logging
import secrets
from pathlib import Path

import pytest
from wyoming.client import AsyncTcpClient
from wyoming.ping import Ping
from zeroconf.asyncio import AsyncZeroconf

from speechd.config import SettingsError, load_settings
from speechd.durable import Store
from speechd.limits import StreamSlots
from speechd.wyoming import SERVICE_TYPE, WyomingDoor
from tests.api._live import free_port

from ._support import READ_S, Served, served


async def _lookup(name: str, timeout_ms: int) -> object | None:
    browser = AsyncZeroconf(interfaces=["127.0.0.1"])
    try:
        return await browser.async_get_service_info(SERVICE_TYPE, name, timeout=timeout_ms)
    finally:
        await browser.async_close()


async def test_the_door_is_advertised_while_it_serves(store: Store, tmp_path: Path) -> None:
    name = f"speechd-test-{secrets.token_hex(4)}"
    port = free_port()
    async with served(store, tmp_path, worker=False) as unix:
        door = WyomingDoor(
            f"tcp://127.0.0.1:{port}",
            service=unix.door.service,
            live=unix.door.live,
            slots=StreamSlots(4, 4),
            default_voice="af_heart",
            voice_map={},
            zeroconf=name,
        )
        await door.start()
        try:
            found = await _lookup(f"{name}.{SERVICE_TYPE}", 5000)
        finally:
            await door.close()
        gone = await _lookup(f"{name}.{SERVICE_TYPE}", 1000)
    assert found is not None
    assert found.port == port  # type: ignore[attr-defined]
    assert found.parsed_addresses() == ["127.0.0.1"]  # type: ignore[attr-defined]
    assert gone is None


def _door_on(unix: Served, port: int, name: str) -> WyomingDoor:
    return WyomingDoor(
        f"tcp://127.0.0.1:{port}",
        service=unix.door.service,
        live=unix.door.live,
        slots=StreamSlots(4, 4),
        default_voice="af_heart",
        voice_map={},
        zeroconf=name,
    )


async def _pong(port: int) -> bool:
    async with AsyncTcpClient("127.0.0.1", port) as client:
        await client.write_event(Ping(text="here?").event())
        event = await asyncio.wait_for(client.read_event(), READ_S)
    return event is not None and event.type == "pong"


async def test_a_name_taken_on_the_network_is_numbered_as_avahi_numbers_it(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two servers under one name (two machines of one host name, or `speechd serve` and
    `speechd wyoming` on one): the second is advertised as `NAME (2)`, and both serve."""
    name = f"speechd-test-{secrets.token_hex(4)}"
    first_port, second_port = free_port(), free_port()
    async with served(store, tmp_path, worker=False) as unix:
        first = _door_on(unix, first_port, name)
        second = _door_on(unix, second_port, name)
        await first.start()
        try:
            with caplog.at_level(logging.WARNING, logger="speechd.wyoming"):
                await second.start()
            try:
                found = await _lookup(f"{name} (2).{SERVICE_TYPE}", 5000)
                original = await _lookup(f"{name}.{SERVICE_TYPE}", 5000)
                assert await _pong(first_port) and await _pong(second_port)
            finally:
                await second.close()
        finally:
            await first.close()
    assert found is not None and found.port == second_port  # type: ignore[attr-defined]
    assert original is not None and original.port == first_port  # type: ignore[attr-defined]
    said = [r.getMessage() for r in caplog.records]
    assert f"the zeroconf name {name!r} is taken on this network; advertising as " in said[0]
    assert f"'{name} (2)' instead" in said[0]


async def test_a_name_zeroconf_refuses_leaves_the_server_serving_undiscovered(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    too_long = "speechd-" + "x" * 60  # 68 bytes: over DNS-SD's 63
    async with served(store, tmp_path, worker=False) as unix:
        door = _door_on(unix, port, too_long)
        with caplog.at_level(logging.WARNING, logger="speechd.wyoming"):
            await door.start()
        try:
            assert await _pong(port)
        finally:
            await door.close()
    (said,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert said.startswith(f"cannot advertise tcp://127.0.0.1:{port} over zeroconf: ")
    # Named in the settings, it stops the start with one line instead.
    with pytest.raises(SettingsError, match="--wyoming-zeroconf / SPEECHD_WYOMING_ZEROCONF"):
        load_settings({"wyoming_zeroconf": too_long}, environ={})
    assert load_settings({"wyoming_zeroconf": "Kitchen (2)"}, environ={}).wyoming_zeroconf
