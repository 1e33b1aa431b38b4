"""The embedded store's files: the persisted layout, so keep it stable.

    <data>/store.db            SQLite, WAL mode, synchronous=FULL; `PRAGMA user_version`
                               names the layout (below)
    <data>/store.db-wal, -shm  SQLite's write-ahead log and its index
    <data>/store.lock          flock'd while a process opens the store (WAL set-up, schema)
    <data>/write.lock          flock'd by a writer thread for each transaction
    <data>/wake/<token>        one per open store: the address of its wake socket, flock'd by
                               its owner for as long as it is open (`_embedded_wake`)

Tables (layout 2):

    streams  (id, name, next_seq, touched_ms, first_seq)
             a stream's tail, its last append's time, and its first readable seq (trim)
    records  ((stream_id, seq) -> ts, headers, body)
             headers are msgpack `[[name, value], ...]` of bytes
    garbage  (stream_id -> start, below)
             records of `stream_id` with `start <= seq < below` are no longer readable (a
             trim, or a deleted stream whose `streams` row is gone) and wait to be purged
             in bounded steps; `start` rises as they go

A stream id is never reused while records of it remain: a new stream takes one above every
id in `streams` and in `records`, so a deleted stream's records waiting in `garbage` never
meet a new stream's.

Layout 1 (speechd before trim) had no `first_seq` and no `garbage`; opening such a file
adds both (instant: SQLite adds a column with a default without rewriting the table) and
marks it layout 2. A speechd that reads only layout 1 then refuses the file.

Space: a file made by layout 2 has `auto_vacuum=INCREMENTAL`, so the store hands freed pages
back to the filesystem a few at a time (`PRAGMA incremental_vacuum`); `journal_size_limit`
bounds the WAL left after a checkpoint. A file made before has `auto_vacuum=NONE` (SQLite can
change that only by rewriting the whole file with VACUUM, which speechd does not do on its
own): freed pages are reused for new records, and the file never shrinks.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from ._contract import DurableError

__all__ = [
    "LAYOUT_VERSION",
    "connect",
    "creation_lock",
    "open_layout",
    "translate_errors",
]

LAYOUT_VERSION = 2
_JOURNAL_SIZE_LIMIT = 32 * 1024 * 1024  # the WAL is cut back to this after a checkpoint

_TABLES = (
    """CREATE TABLE IF NOT EXISTS streams (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        next_seq INTEGER NOT NULL,
        touched_ms INTEGER NOT NULL,
        first_seq INTEGER NOT NULL DEFAULT 0
    )""",
    """CREATE TABLE IF NOT EXISTS records (
        stream_id INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        ts INTEGER NOT NULL,
        headers BLOB NOT NULL,
        body BLOB NOT NULL,
        PRIMARY KEY (stream_id, seq)
    )""",
    """CREATE TABLE IF NOT EXISTS garbage (
        stream_id INTEGER PRIMARY KEY,
        start INTEGER NOT NULL,
        below INTEGER NOT NULL
    )""",
)

# Layout 1 -> 2, statement by statement.
_FROM_1 = (
    "ALTER TABLE streams ADD COLUMN first_seq INTEGER NOT NULL DEFAULT 0",
    _TABLES[2],
)


def connect(path: Path) -> sqlite3.Connection:
    """A connection to a store database that `open_layout` has already set up."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=60.0)
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA busy_timeout=60000")
    conn.execute(f"PRAGMA journal_size_limit={_JOURNAL_SIZE_LIMIT}")
    return conn


@contextlib.contextmanager
def creation_lock(data_dir: Path) -> Iterator[None]:
    """Serialise opening the database across processes.

    Switching a new database to WAL mode takes an exclusive lock without waiting on the busy
    timeout, so processes opening a fresh folder at once failed with 'database is locked'.
    """
    fd = os.open(data_dir / "store.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def translate_errors(doing: str) -> Iterator[None]:
    """Raise sqlite3's errors (and OSError) as DurableError, chained."""
    try:
        yield
    except (sqlite3.Error, OSError) as exc:
        raise DurableError(f"{doing} failed: {exc}") from exc


def open_layout(db_path: Path) -> bool:
    """Make or upgrade the database at `db_path` (under `creation_lock`).

    Returns whether the file gives space back (`auto_vacuum=INCREMENTAL`).
    """
    conn = connect(db_path)
    try:
        # auto_vacuum can be chosen only before the first table exists; on an older file
        # this is a no-op and the file keeps auto_vacuum=NONE.
        conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
        (mode,) = conn.execute("PRAGMA journal_mode=WAL").fetchone()
        if mode != "wal":
            raise DurableError(f"{db_path} cannot use WAL mode (journal_mode is {mode})")
        conn.execute("BEGIN IMMEDIATE")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, 1, LAYOUT_VERSION):
            conn.execute("ROLLBACK")
            raise DurableError(
                f"{db_path} has store layout {version}; this speechd reads {LAYOUT_VERSION}"
            )
        # One statement at a time: executescript would COMMIT the transaction first.
        for statement in _TABLES if version == 0 else _FROM_1 if version == 1 else ():
            conn.execute(statement)
        if version != LAYOUT_VERSION:
            conn.execute(f"PRAGMA user_version={LAYOUT_VERSION}")
        conn.execute("COMMIT")
        return bool(conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2)
    finally:
        conn.close()
