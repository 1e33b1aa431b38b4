"""A `unix://` Wyoming address takes only what is its to take: a path that is something else
(a file, a folder, a link) is refused and left as it was, a socket a server answers on is
refused (the address is in use, and that server goes on serving), and a stale socket (its
server died) is replaced. Stopping removes the socket only while it is still the door's own."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from wyoming.client import AsyncUnixClient
from wyoming.ping import Ping, Pong

from speechd.durable import Store
from speechd.limits import StreamSlots
from speechd.wyoming import WyomingDoor
from tests.api._live import ROOT, _env

from ._support import READ_S, served


@contextlib.asynccontextmanager
async def _door(like: WyomingDoor, path: Path) -> AsyncIterator[WyomingDoor]:
    """Another door over `like`'s service, on the unix socket `path`, started."""
    door = WyomingDoor(
        f"unix://{path}",
        service=like.service,
        live=like.live,
        slots=StreamSlots(4, 4),
        default_voice="af_heart",
        voice_map={},
    )
    try:
        await door.start()
        yield door
    finally:
        await door.close()


async def _serves(path: Path) -> bool:
    async with AsyncUnixClient(str(path)) as client:
        await client.write_event(Ping(text="here?").event())
        event = await asyncio.wait_for(client.read_event(), READ_S)
    return event is not None and Pong.is_type(event.type)


async def test_a_path_that_is_not_a_socket_is_refused_and_left_alone(
    store: Store, tmp_path: Path
) -> None:
    precious = tmp_path / "notes.txt"
    precious.write_text("a file someone mistyped the path of\n")
    folder = tmp_path / "folder"
    folder.mkdir()
    link = tmp_path / "link.sock"
    link.symlink_to(precious)
    async with served(store, tmp_path, worker=False) as running:
        for path in (precious, folder, link):
            with pytest.raises(OSError):
                async with _door(running.door, path):
                    pass
        assert precious.read_text() == "a file someone mistyped the path of\n"
        assert folder.is_dir() and link.is_symlink()


async def test_a_socket_in_use_is_refused_and_its_server_goes_on(
    store: Store, tmp_path: Path
) -> None:
    async with served(store, tmp_path, worker=False) as running:
        with pytest.raises(OSError, match="listening on it already"):
            async with _door(running.door, running.path):
                pass
        assert running.path.is_socket()
        assert await _serves(running.path)


async def test_a_stale_socket_is_replaced_and_a_door_removes_only_its_own(
    store: Store, tmp_path: Path
) -> None:
    stale = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(str(stale))  # a server that died without removing its socket
    async with served(store, tmp_path, worker=False) as running:
        async with _door(running.door, stale) as door:
            assert await _serves(stale)
            # Another takes the path over meanwhile (it was removed and bound again): this
            # door's stop leaves it.
            stale.unlink()
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as other:
                other.bind(str(stale))
                await door.close()
                assert stale.is_socket()
        stale.unlink()
        async with _door(running.door, stale):
            assert stale.is_socket()
        assert not stale.exists()  # its own: removed as it stopped


@pytest.mark.slow
def test_speechd_wyoming_over_a_file_says_so_and_leaves_the_file(tmp_path: Path) -> None:
    precious = tmp_path / "notes.txt"
    precious.write_text("kept\n")
    args = ["wyoming", "--data-dir", str(tmp_path / "data"), "--wyoming-uri", f"unix://{precious}"]
    done = subprocess.run(
        [sys.executable, "-m", "speechd", *args],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert f"cannot serve Wyoming on unix://{precious}: " in done.stderr
    assert "Traceback" not in done.stderr
    assert precious.read_text() == "kept\n"
