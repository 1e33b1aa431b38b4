"""The embedded backend's own promises: its files, its durability settings, its wake-ups."""

from __future__ import annotations

import asyncio
import fcntl
import os
import socket
import sqlite3
import time
from pathlib import Path

import pytest

from speechd.durable import DurableError, EmbeddedStore, _embedded, open_store

from ._support import rec


@pytest.fixture
def no_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stores opened after this poll data_version only every minute: a wake-up within the test
    can then only come from a datagram."""
    monkeypatch.setattr(_embedded, "_POLL_INTERVAL_S", 60.0)


async def test_open_store_picks_the_embedded_backend_for_paths(tmp_path: Path) -> None:
    for url in (str(tmp_path / "a"), f"file:{tmp_path / 'b'}", f"file://{tmp_path / 'c'}"):
        async with await open_store(url) as store:
            assert isinstance(store, EmbeddedStore)
            await store.append("s", [rec(b"x")])
    assert sorted(os.listdir(tmp_path)) == ["a", "b", "c"]


async def test_layout_and_durability_settings(embedded_url: str) -> None:
    async with await open_store(embedded_url) as store:
        assert isinstance(store, EmbeddedStore)
        await store.append("s", [rec(b"x")])
        writer_conn = store._writer._conn
        assert writer_conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert writer_conn.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL
        tokens = os.listdir(Path(embedded_url) / "wake")
        assert len(tokens) == 1
    db = sqlite3.connect(Path(embedded_url) / "store.db")
    try:
        assert db.execute("PRAGMA user_version").fetchone() == (2,)
        assert db.execute("PRAGMA auto_vacuum").fetchone() == (2,)  # INCREMENTAL
        assert db.execute("SELECT name, next_seq FROM streams").fetchall() == [("s", 1)]
    finally:
        db.close()
    assert os.listdir(Path(embedded_url) / "wake") == []  # closing unregisters


async def test_a_newer_layout_is_refused(embedded_url: str) -> None:
    async with await open_store(embedded_url):
        pass
    db = sqlite3.connect(Path(embedded_url) / "store.db")
    db.execute("PRAGMA user_version=99")
    db.close()
    with pytest.raises(DurableError, match="layout 99"):
        await open_store(embedded_url)


async def test_a_folder_that_cannot_be_a_store_raises_durable_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(DurableError):
        await open_store(str(tmp_path / "file"))
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "store.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(DurableError):
        await open_store(str(tmp_path / "garbage"))


async def test_wake_datagrams_wake_another_handle_without_the_poll(
    embedded_url: str, no_poll: None
) -> None:
    async with await open_store(embedded_url) as reader, await open_store(embedded_url) as writer:
        for seq in range(5):
            poll = asyncio.ensure_future(reader.read("s", seq, wait=30))
            await asyncio.sleep(0.02)
            await writer.append("s", [rec(b"%d" % seq)])
            batch = await asyncio.wait_for(poll, 2)
            assert batch.records[0].seq_num == seq


async def test_a_store_registered_within_the_folders_mtime_granularity_still_hears(
    embedded_url: str, no_poll: None
) -> None:
    """On coarse-timestamp filesystems a new store can register without changing the wake
    folder's mtime; the writer must still find it."""
    wake_dir = Path(embedded_url) / "wake"
    async with await open_store(embedded_url) as writer:
        await writer.append("warm", [rec()])  # the writer has looked at its peers once
        before = wake_dir.stat()
        async with await open_store(embedded_url) as reader:
            os.utime(wake_dir, ns=(before.st_atime_ns, before.st_mtime_ns))
            poll = asyncio.ensure_future(reader.read("s", 0, wait=30))
            await asyncio.sleep(0.02)
            await writer.append("s", [rec(b"x")])
            batch = await asyncio.wait_for(poll, 2)
            assert [r.body for r in batch.records] == [b"x"]


async def test_a_lost_datagram_is_caught_by_the_data_version_poll(
    embedded_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_embedded, "_POLL_INTERVAL_S", 0.2)
    async with await open_store(embedded_url) as writer:
        assert isinstance(writer, EmbeddedStore)
        monkeypatch.setattr(writer._bus, "broadcast", lambda streams: None)
        async with await open_store(embedded_url) as reader:
            # The append lands before the reader's first poll: the poll's baseline must come
            # from before it, or the change is never noticed.
            poll = asyncio.ensure_future(reader.read("s", 0, wait=20))
            await asyncio.sleep(0.01)
            await writer.append("s", [rec(b"x")])
            started = time.monotonic()
            batch = await asyncio.wait_for(poll, 5)
            assert [r.body for r in batch.records] == [b"x"]
            assert time.monotonic() - started < 2
            # And later ones, once polling is under way.
            for seq in range(1, 4):
                poll = asyncio.ensure_future(reader.read("s", seq, wait=20))
                await asyncio.sleep(0.3)
                await writer.append("s", [rec(b"y")])
                assert (await asyncio.wait_for(poll, 5)).records


async def test_a_dead_stores_registration_is_removed_on_the_next_append(
    embedded_url: str, no_poll: None
) -> None:
    wake_dir = Path(embedded_url) / "wake"
    async with await open_store(embedded_url) as writer, await open_store(embedded_url) as reader:
        wake_dir.joinpath("999999-0123456789ab").touch()  # nobody listens there
        poll = asyncio.ensure_future(reader.read("s", 0, wait=30))
        await asyncio.sleep(0.02)
        await writer.append("s", [rec()])
        await asyncio.wait_for(poll, 2)
        assert "999999-0123456789ab" not in os.listdir(wake_dir)
        assert len(os.listdir(wake_dir)) == 2


async def test_a_live_store_in_another_network_namespace_keeps_its_registration(
    embedded_url: str, no_poll: None
) -> None:
    """Abstract sockets are per network namespace: a writer in another namespace (another
    container on the same volume) has its datagrams to our stores refused, as if nobody
    listened. It must not remove their registrations, or the stores of their own namespace
    stop waking them (issue 20: the wake-ups fall back to the poll)."""
    wake_dir = Path(embedded_url) / "wake"
    async with (
        await open_store(embedded_url) as reader,
        await open_store(embedded_url) as neighbour,
        await open_store(embedded_url) as stranger,
    ):
        assert isinstance(reader, EmbeddedStore) and isinstance(stranger, EmbeddedStore)
        # The stranger sends as from another namespace: to addresses nobody here listens on.
        stranger._bus._namespace = "another-network-namespace"
        for i in range(3):
            await stranger.append("elsewhere", [rec(b"%d" % i)])  # each broadcast refused
        assert reader._bus._token in os.listdir(wake_dir)
        assert len(os.listdir(wake_dir)) == 3
        for seq in range(3):
            poll = asyncio.ensure_future(reader.read("s", seq, wait=30))
            await asyncio.sleep(0.02)
            await neighbour.append("s", [rec(b"%d" % seq)])
            batch = await asyncio.wait_for(poll, 5)
            assert [r.seq_num for r in batch.records] == [seq]


async def test_junk_in_the_wake_folder_or_on_the_socket_breaks_nothing(
    embedded_url: str, no_poll: None
) -> None:
    wake_dir = Path(embedded_url) / "wake"
    async with await open_store(embedded_url) as writer, await open_store(embedded_url) as reader:
        assert isinstance(reader, EmbeddedStore)
        wake_dir.joinpath("x" * 200).touch()  # too long for a socket address
        wake_dir.joinpath("README").touch()
        wake_dir.joinpath("sub").mkdir()
        # A stranger's datagram on the reader's socket.
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as stranger:
            stranger.sendto(b"\xff\xfe", reader._bus._address(reader._bus._token))
        for seq in range(3):
            poll = asyncio.ensure_future(reader.read("s", seq, wait=30))
            await asyncio.sleep(0.02)
            await writer.append("s", [rec()])
            await asyncio.wait_for(poll, 2)
        assert (await writer.append("t", [rec()])).start_seq == 0


async def test_many_stores_in_one_folder_all_hear_each_other(
    embedded_url: str, no_poll: None
) -> None:
    stores = [await open_store(embedded_url) for _ in range(6)]
    try:
        for writer in stores:
            seq = await writer.check_tail("s")
            polls = [
                asyncio.ensure_future(s.read("s", seq, wait=30)) for s in stores if s is not writer
            ]
            await asyncio.sleep(0.02)
            await writer.append("s", [rec()])
            for batch in await asyncio.wait_for(asyncio.gather(*polls), 2):
                assert batch.records[0].seq_num == seq
    finally:
        for store in stores:
            await store.close()


async def test_writers_take_turns_on_the_write_lock_file(embedded_url: str) -> None:
    """Each group transaction holds an flock on write.lock, so writers in other processes wait
    there (woken at once) rather than in SQLite's busy handler (sleeping up to 100 ms)."""
    async with await open_store(embedded_url) as store:
        await store.append("s", [rec(b"0")])
        fd = os.open(Path(embedded_url) / "write.lock", os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # as another process's writer would
            append = asyncio.ensure_future(store.append("s", [rec(b"1")]))
            await asyncio.sleep(0.3)
            assert not append.done()
            fcntl.flock(fd, fcntl.LOCK_UN)
            assert (await asyncio.wait_for(append, 5)).start_seq == 1
        finally:
            os.close(fd)
