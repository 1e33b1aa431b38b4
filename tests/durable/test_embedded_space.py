"""The embedded store over months: sweeps in bounded steps, trimmed and deleted records purged,
space handed back to the filesystem, files of the older layout kept working."""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from speechd.durable import EmbeddedStore, Store, open_store
from speechd.durable import _embedded_janitor as janitor
from speechd.durable import _embedded_writer as writer_module

from ._support import read_all, rec


def _db(url: str) -> sqlite3.Connection:
    return sqlite3.connect(Path(url) / "store.db", isolation_level=None)


def _scalar(url: str, sql: str, *args: object) -> Any:
    db = _db(url)
    try:
        return db.execute(sql, args).fetchone()[0]
    finally:
        db.close()


async def _fill(store: Store, streams: int, records: int, size: int, prefix: str = "tmp") -> None:
    body = os.urandom(size)
    room = asyncio.Semaphore(32)

    async def one(i: int) -> None:
        async with room:
            await store.append(f"{prefix}/{i}", [rec(body)] * records)

    await asyncio.gather(*(one(i) for i in range(streams)))


@pytest.fixture
def transactions(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[bool, int]]]:
    """Every writer transaction from now on: (background, rows it changed)."""
    seen: list[tuple[bool, int]] = []
    original = writer_module.Writer._commit

    def spy(self: Any, ops: Any, *, background: bool) -> Any:
        before = self._conn.total_changes
        result = original(self, ops, background=background)
        seen.append((background, self._conn.total_changes - before))
        return result

    monkeypatch.setattr(writer_module.Writer, "_commit", spy)
    yield seen


async def test_a_sweep_goes_in_bounded_steps_while_others_append(
    embedded_url: str, transactions: list[tuple[bool, int]]
) -> None:
    """300 expired streams of 40 records: the sweep deletes and purges them in many small
    background transactions, and appends of another handle (as another process's) land all
    through it."""
    async with await open_store(embedded_url) as store, await open_store(embedded_url) as other:
        await _sweep_while_appending(embedded_url, store, other, transactions)


async def _sweep_while_appending(
    embedded_url: str, store: Store, other: Store, transactions: list[tuple[bool, int]]
) -> None:
    await _fill(store, 300, 40, 2048)
    await asyncio.sleep(0.3)
    transactions.clear()
    sweeping = asyncio.ensure_future(store.sweep(0.2, ["tmp/"]))
    acks_during = 0
    while not sweeping.done():
        await other.append("pub/live", [rec(b"chunk")])
        acks_during += not sweeping.done()
    assert await sweeping == 300
    assert await store.list("tmp/") == []
    assert _scalar(embedded_url, "SELECT count(*) FROM garbage") == 0
    live = await other.check_tail("pub/live")
    assert _scalar(embedded_url, "SELECT count(*) FROM records") == live
    background = [changes for is_bg, changes in transactions if is_bg]
    # 12,000 records and 300 streams: never more than one step's worth in a transaction.
    assert len(background) >= 12_000 // janitor._PURGE_RECORDS
    assert max(background) <= max(janitor._PURGE_RECORDS + 1, 2 * 64)
    assert acks_during >= 10


async def test_a_sweep_hands_the_space_back(embedded_url: str) -> None:
    async with await open_store(embedded_url) as store:
        await _fill(store, 100, 20, 16 * 1024)  # ~32 MiB
        await store.append("keep", [rec(b"k")])
        await asyncio.sleep(0.3)
        full = _scalar(embedded_url, "PRAGMA page_count")
        assert await store.sweep(0.2, ["tmp/"]) == 100
        assert _scalar(embedded_url, "PRAGMA page_count") < full // 4
    size = (Path(embedded_url) / "store.db").stat().st_size
    assert size < full * 4096 // 4
    assert not (Path(embedded_url) / "store.db-wal").exists()  # the last close checkpoints
    async with await open_store(embedded_url) as store:
        assert [r.body for r in await read_all(store, "keep")] == [b"k"]


async def test_trimmed_records_are_purged_and_their_space_handed_back(embedded_url: str) -> None:
    async with await open_store(embedded_url) as store:
        assert isinstance(store, EmbeddedStore)
        for _ in range(40):
            await store.append("jobs", [rec(os.urandom(16 * 1024))] * 25)  # 1000, ~16 MiB
        full = _scalar(embedded_url, "PRAGMA page_count")
        assert await store.trim("jobs", 999) == 999
        await store._janitor.settle()
        assert _scalar(embedded_url, "SELECT count(*) FROM records") == 1
        # All but the few free pages the janitor keeps for the next appends.
        assert _scalar(embedded_url, "PRAGMA page_count") < janitor._FREE_RESERVE_PAGES + 64
        assert full > 4 * janitor._FREE_RESERVE_PAGES
        (kept,) = (await store.read("jobs", 999)).records
        assert kept.seq_num == 999


def _make_layout_1(url: str, streams: dict[str, list[bytes]]) -> None:
    """A data folder as speechd wrote it before trim (layout 1, auto_vacuum NONE)."""
    Path(url).mkdir(parents=True)
    db = _db(url)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(
        "CREATE TABLE streams (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,"
        " next_seq INTEGER NOT NULL, touched_ms INTEGER NOT NULL)"
    )
    db.execute(
        "CREATE TABLE records (stream_id INTEGER NOT NULL, seq INTEGER NOT NULL,"
        " ts INTEGER NOT NULL, headers BLOB NOT NULL, body BLOB NOT NULL,"
        " PRIMARY KEY (stream_id, seq))"
    )
    now = time.time_ns() // 1_000_000
    headers = msgspec.msgpack.encode(((b"e", b"audio"),))
    for name, bodies in streams.items():
        stream_id = db.execute(
            "INSERT INTO streams (name, next_seq, touched_ms) VALUES (?, ?, ?)",
            (name, len(bodies), now),
        ).lastrowid
        db.executemany(
            "INSERT INTO records VALUES (?, ?, ?, ?, ?)",
            [(stream_id, i, now, headers, body) for i, body in enumerate(bodies)],
        )
    db.execute("PRAGMA user_version=1")
    db.close()


async def test_a_data_folder_of_the_older_layout_keeps_working(
    embedded_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    _make_layout_1(embedded_url, {"pub/casts/a": [b"0", b"1", b"2"], "jobs": [b"j0", b"j1"]})
    with caplog.at_level(logging.INFO, logger="speechd.durable"):
        store = await open_store(embedded_url)
    try:
        assert any("never shrinks" in r.getMessage() for r in caplog.records)
        records = await read_all(store, "pub/casts/a")
        assert [(r.body, r.header(b"e")) for r in records] == [
            (b"0", b"audio"),
            (b"1", b"audio"),
            (b"2", b"audio"),
        ]
        assert [(i.name, i.first_seq) for i in await store.list()] == [
            ("jobs", 0),
            ("pub/casts/a", 0),
        ]
        assert await store.trim("jobs", 1) == 1
        assert [r.body for r in (await store.read("jobs", 1)).records] == [b"j1"]
        assert await store.delete("pub/casts/a")
        await store.append("pub/casts/b", [rec(b"new")], match_seq_num=0)
        assert [r.body for r in await read_all(store, "pub/casts/b")] == [b"new"]
        assert isinstance(store, EmbeddedStore)
        await store._janitor.settle()
    finally:
        await store.close()
    assert _scalar(embedded_url, "PRAGMA user_version") == 2
    assert _scalar(embedded_url, "PRAGMA auto_vacuum") == 0  # not rewritten behind anyone's back
    assert _scalar(embedded_url, "SELECT count(*) FROM records") == 2  # j1, new


async def test_records_left_to_purge_by_a_process_that_died_are_purged_later(
    embedded_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process deleted a stream (its row went) and died before purging its records: a new
    stream made meanwhile never sees them, and the next janitor purges them."""
    async with await open_store(embedded_url) as store:
        await store.append("dead", [rec(b"old%d" % i) for i in range(5)])
    old_id = _scalar(embedded_url, "SELECT id FROM streams WHERE name='dead'")
    db = _db(embedded_url)
    db.execute("DELETE FROM streams WHERE id=?", (old_id,))
    db.execute("INSERT INTO garbage VALUES (?, 0, 5)", (old_id,))
    db.close()
    idle = janitor._purge_step

    def nothing(conn: sqlite3.Connection, now: int) -> tuple[bool, list[str]]:
        return False, []

    monkeypatch.setattr(janitor, "_purge_step", nothing)
    async with await open_store(embedded_url) as store:
        assert isinstance(store, EmbeddedStore)
        await store.append("dead", [rec(b"new")])  # the same name, a new stream
        await store.append("other", [rec(b"o")])
        assert [r.body for r in await read_all(store, "dead")] == [b"new"]
        ids = {
            _scalar(embedded_url, "SELECT id FROM streams WHERE name=?", n)
            for n in ("dead", "other")
        }
        assert old_id not in ids
        monkeypatch.setattr(janitor, "_purge_step", idle)
        await store._janitor.settle()
        assert _scalar(embedded_url, "SELECT count(*) FROM records") == 2
        assert [r.body for r in await read_all(store, "dead")] == [b"new"]
