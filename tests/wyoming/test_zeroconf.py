"""`--wyoming-zeroconf`: the door is advertised as `_wyoming._tcp.local.` while it serves and
withdrawn when it stops, found by a python-zeroconf browser as Home Assistant's finds it.
Everything stays on the loopback interface (the door listens on 127.0.0.1)."""

from __future__ import annotations

import secrets
from pathlib import Path

from zeroconf.asyncio import AsyncZeroconf

from speechd.durable import Store
from speechd.limits import StreamSlots
from speechd.wyoming import SERVICE_TYPE, WyomingDoor
from tests.api._live import free_port

from ._support import served


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
