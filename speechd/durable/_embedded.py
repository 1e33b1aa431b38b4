"""The embedded backend: one SQLite database in a data folder, shared by several processes.

On disk (persisted, so keep it stable; `PRAGMA user_version` names the layout):

    <data>/store.db            tables `streams` (name -> id, next seq, last touch) and
                               `records` ((stream id, seq) -> timestamp, headers, body)
    <data>/store.db-wal, -shm  SQLite's write-ahead log (WAL mode, synchronous=FULL)
    <data>/store.lock          flock'd while a process opens the store (WAL set-up, schema)
    <data>/write.lock          flock'd by a writer thread for each group transaction
    <data>/wake/<token>        one empty file per open store: the address of its wake socket

Writes: one writer thread per open store drains every append queued while the previous
transaction committed and commits them together (group commit), so durability costs one WAL
fsync per batch of appends, not per record. An append is acknowledged only after COMMIT
returned, and a round's outcomes reach the event loop in one hop. Conditional appends are
checked inside the transaction, each in a savepoint, so one failed condition never undoes its
neighbours. An append cancelled before the writer takes it is not applied; one cancelled
later is applied, and its caller does not hear. Writers of different processes take turns on
the flock of `write.lock` (woken at once), then on SQLite's write lock. Checkpoints are
SQLite's automatic ones (every ~4 MB of WAL, inside the COMMIT that crosses it); running them
on another thread was measured slower (the WAL grows instead of being rewound).

Wake-ups: after a commit the writer sends the changed stream names as one datagram to every
other open store's abstract unix socket (Linux), listing `wake/` afresh each time; a reader
waiting in another process wakes within a millisecond. A datagram can be dropped (a full
socket buffer), so each store also polls `PRAGMA data_version` while anyone waits, from a
baseline taken at open; that bounds a missed wake-up to `_POLL_INTERVAL_S`. Off Linux, or
between network namespaces (containers), the poll is the only wake-up. A registration left by
a process that died is removed by the next broadcast that finds nobody listening.

Limits: one machine, local disk (SQLite over a network filesystem is not safe); one writer at
a time across processes, so write throughput is one disk's fsync rate times the batch size;
the limits of `_contract` (record 1 MiB, headers 64 KiB, batch 1000 records / 8 MiB, names
512 bytes). Open the store after forking or spawning a process, never before.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import queue
import re
import secrets
import socket
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec

from ._contract import (
    MAX_BATCH_BYTES,
    AppendAck,
    AppendRecord,
    DurableError,
    ReadBatch,
    Record,
    SeqMismatch,
    SeqOutOfRange,
    Store,
    StoreClosed,
    StreamInfo,
    check_batch,
    validate_name,
)

__all__ = ["EmbeddedStore"]

log = logging.getLogger("speechd.durable")

_LAYOUT_VERSION = 1
_POLL_INTERVAL_S = 0.5
_MAX_GROUP_OPS = 1024
_MAX_GROUP_BYTES = 16 * 1024 * 1024
_MAX_WAKE_PAYLOAD = 16 * 1024
_READ_THREADS = 4

_SCHEMA = """
CREATE TABLE IF NOT EXISTS streams (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    next_seq INTEGER NOT NULL,
    touched_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS records (
    stream_id INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    ts INTEGER NOT NULL,
    headers BLOB NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (stream_id, seq)
);
"""

_headers_encoder = msgspec.msgpack.Encoder()
_headers_decoder = msgspec.msgpack.Decoder(tuple[tuple[bytes, bytes], ...])


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _connect(path: Path) -> sqlite3.Connection:
    """A connection to a store database that `_create_schema` has already put in WAL mode."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=60.0)
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA busy_timeout=60000")
    return conn


@contextlib.contextmanager
def _creation_lock(data_dir: Path) -> Iterator[None]:
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
def _translate_errors(doing: str) -> Iterator[None]:
    """Raise sqlite3's errors (and OSError) as DurableError, chained."""
    try:
        yield
    except (sqlite3.Error, OSError) as exc:
        raise DurableError(f"{doing} failed: {exc}") from exc


# Applies one write inside the group transaction at time `now`; returns (result, changed streams).
_Apply = Callable[[sqlite3.Connection, int], tuple[Any, list[str]]]


class _Op:
    """One queued write: applied by the writer thread inside a group transaction.

    `future` belongs to the store's event loop; the writer thread only reads `cancelled()`
    and hands the outcome back through one `call_soon_threadsafe` per round.
    """

    __slots__ = ("apply", "future", "size")

    def __init__(self, apply: _Apply, size: int, future: asyncio.Future[Any]) -> None:
        self.apply = apply
        self.size = size
        self.future = future


# Per op (ok, result or exception), in order.
_Outcomes = list[tuple[bool, Any]]

_STOP = object()


class _Writer(threading.Thread):
    """Owns the write connection; commits every queued op in one transaction per round.

    After each round it calls `deliver(ops, outcomes, changed streams)` (which hands them to
    the event loop) and then `broadcast(changed streams)` (the other processes' wake-up).

    The thread must outlive every failure: an op whose caller went away (a cancelled append)
    is skipped if it has not started, and any error fails that round's ops, never the thread.
    """

    def __init__(self, path: Path) -> None:
        super().__init__(name="speechd-store-writer", daemon=True)
        self._conn = _connect(path)
        self._lock_fd = os.open(path.with_name("write.lock"), os.O_RDWR | os.O_CREAT, 0o644)
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.deliver: Callable[[list[_Op], _Outcomes, list[str]], None] = lambda *args: None
        self.broadcast: Callable[[list[str]], None] = lambda streams: None

    def close(self) -> None:
        """Close the connection of a writer that was never started."""
        self._conn.close()
        os.close(self._lock_fd)

    def submit(self, op: _Op) -> None:
        self._queue.put(op)

    def stop(self) -> None:
        self._queue.put(_STOP)
        self.join()

    def run(self) -> None:
        carried: _Op | None = None  # taken from the queue but over the last round's size cap
        while True:
            ops: list[_Op] = [] if carried is None else [carried]
            size = 0 if carried is None else carried.size
            carried = None
            stopping = False
            while len(ops) < _MAX_GROUP_OPS:
                try:
                    item = self._queue.get_nowait() if ops else self._queue.get()
                except queue.Empty:
                    break
                if item is _STOP:
                    stopping = True
                    break
                # An op cancelled before we take it (its caller gave up) is dropped unapplied.
                # One cancelled later is applied; its caller just never hears.
                if item.future.cancelled():
                    continue
                if ops and size + item.size > _MAX_GROUP_BYTES:
                    carried = item
                    break
                ops.append(item)
                size += item.size
            if ops:
                self._round(ops)
            if stopping:
                break
        self.close()

    def _round(self, ops: list[_Op]) -> None:
        outcomes, changed = self._commit(ops)
        try:
            self.deliver(ops, outcomes, changed)
        except Exception:
            log.exception("store: handing results back to the event loop failed")
        if changed:
            try:
                self.broadcast(changed)
            except Exception:
                # The appends are durable and acknowledged; only a wake-up was lost, and the
                # readers' data_version poll covers that.
                log.exception("store: waking the other processes after a commit failed")

    def _commit(self, ops: list[_Op]) -> tuple[_Outcomes, list[str]]:
        outcomes: _Outcomes = []
        changed: list[str] = []
        try:
            # Writers in other processes queue on this flock, and each is woken the moment the
            # holder is done; waiting on SQLite's own lock instead means its busy handler's
            # sleeps (1, 2, 5 ... 100 ms), which cost several writer processes most of their
            # throughput. The flock is released when the holder dies.
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            self._conn.execute("BEGIN IMMEDIATE")
            now = _now_ms()
            for op in ops:
                self._conn.execute("SAVEPOINT op")
                try:
                    value, streams = op.apply(self._conn, now)
                except DurableError as exc:
                    self._conn.execute("ROLLBACK TO op")
                    outcomes.append((False, exc))
                else:
                    changed.extend(streams)
                    outcomes.append((True, value))
                self._conn.execute("RELEASE op")
            self._conn.execute("COMMIT")
        except Exception as exc:
            with contextlib.suppress(sqlite3.Error):
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
            failure = DurableError(f"store write failed: {exc}")
            failure.__cause__ = exc
            return [(False, failure)] * len(ops), []
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        return outcomes, changed


_TOKEN = re.compile(r"[0-9]+-[0-9a-f]{12}")


class _WakeBus:
    """Datagrams between the open stores of one data folder: 'these streams changed'."""

    def __init__(self, data_dir: Path) -> None:
        self._dir = data_dir / "wake"
        self._dir.mkdir(exist_ok=True)
        self._namespace = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:16]
        self._token = f"{os.getpid()}-{secrets.token_hex(6)}"
        self._listener: socket.socket | None = None
        self._sender: socket.socket | None = None
        if sys.platform.startswith("linux"):
            self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._listener.bind(self._address(self._token))
            self._listener.setblocking(False)
            self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sender.setblocking(False)
            # Registered only once bound, so a peer never finds a token with no socket behind it.
            (self._dir / self._token).touch()

    @property
    def listener(self) -> socket.socket | None:
        return self._listener

    def _address(self, token: str) -> bytes:
        return f"\0speechd/{self._namespace}/{token}".encode()

    def _peers(self) -> list[str]:
        # Listed afresh for every broadcast (a few microseconds next to the commit's fsync): a
        # listing cached by the folder's mtime misses a store that registers within the mtime's
        # granularity (a jiffy, or a second on some filesystems), which then never hears a wake.
        try:
            names = os.listdir(self._dir)
        except FileNotFoundError:
            return []
        return [name for name in names if name != self._token and _TOKEN.fullmatch(name)]

    def broadcast(self, streams: list[str]) -> None:
        """Tell every other store in this folder which streams changed (writer thread)."""
        if self._sender is None:
            return
        payload = "\n".join(dict.fromkeys(streams)).encode()
        if len(payload) > _MAX_WAKE_PAYLOAD:
            payload = b"*"
        for peer in self._peers():
            try:
                self._sender.sendto(payload, self._address(peer))
            except (ConnectionRefusedError, FileNotFoundError):
                # Nobody listens there any more: that store's process died without closing.
                with contextlib.suppress(FileNotFoundError):
                    (self._dir / peer).unlink()
            except OSError as exc:
                # A full buffer (EAGAIN, ENOBUFS) or anything else: this peer misses one
                # datagram, and its data_version poll catches the change.
                if exc.errno not in (errno.EAGAIN, errno.ENOBUFS):
                    log.debug("store: wake datagram to %s failed: %s", peer, exc)

    def receive(self) -> list[str] | None:
        """Drain pending datagrams: the changed stream names, or None for 'anything'."""
        assert self._listener is not None
        names: list[str] = []
        while True:
            try:
                data = self._listener.recv(65536)
            except BlockingIOError:
                return names
            if data == b"*":
                return None
            try:
                names.extend(data.decode("ascii").split("\n"))
            except UnicodeDecodeError:
                return None  # not from a store (anyone may send here): wake everyone

    def close(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self._dir / self._token).unlink()
        for sock in (self._listener, self._sender):
            if sock is not None:
                sock.close()


class EmbeddedStore(Store):
    """The stream store in a local data folder. Open with `await EmbeddedStore.open(path)`."""

    def __init__(
        self, data_dir: Path, writer: _Writer, bus: _WakeBus, version_conn: sqlite3.Connection
    ) -> None:
        """Use `open`, which makes the files and connections off the event loop."""
        self._data_dir = data_dir
        self._db_path = data_dir / "store.db"
        self._loop = asyncio.get_running_loop()
        self._closed = False
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        self._local = threading.local()
        self._reader_conns: list[sqlite3.Connection] = []
        self._readers = concurrent.futures.ThreadPoolExecutor(
            max_workers=_READ_THREADS, thread_name_prefix="speechd-store-reader"
        )
        self._bus = bus
        self._writer = writer
        writer.deliver = self._deliver_threadsafe
        writer.broadcast = bus.broadcast
        self._version_conn = version_conn
        self._poll_task: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, data_dir: str | os.PathLike[str]) -> EmbeddedStore:
        path = Path(data_dir)
        writer, bus, version_conn, version = await asyncio.to_thread(cls._open_files, path)
        store = cls(path, writer, bus, version_conn)
        writer.start()
        if bus.listener is not None:
            store._loop.add_reader(bus.listener.fileno(), store._on_wake_datagram)
        store._poll_task = asyncio.create_task(store._poll_data_version(version_conn, version))
        return store

    @staticmethod
    def _open_files(data_dir: Path) -> tuple[_Writer, _WakeBus, sqlite3.Connection, int]:
        with _translate_errors(f"opening the store in {data_dir}"):
            data_dir.mkdir(parents=True, exist_ok=True)
            with _creation_lock(data_dir):
                EmbeddedStore._create_schema(data_dir / "store.db")
            version_conn = _connect(data_dir / "store.db")
            try:
                version = version_conn.execute("PRAGMA data_version").fetchone()[0]
                writer = _Writer(data_dir / "store.db")
            except BaseException:
                version_conn.close()
                raise
            try:
                bus = _WakeBus(data_dir)
            except BaseException:
                writer.close()
                version_conn.close()
                raise
        return writer, bus, version_conn, version

    @staticmethod
    def _create_schema(db_path: Path) -> None:
        conn = _connect(db_path)
        try:
            (mode,) = conn.execute("PRAGMA journal_mode=WAL").fetchone()
            if mode != "wal":
                raise DurableError(f"{db_path} cannot use WAL mode (journal_mode is {mode})")
            conn.execute("BEGIN IMMEDIATE")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, _LAYOUT_VERSION):
                conn.execute("ROLLBACK")
                raise DurableError(
                    f"{db_path} has store layout {version}; this speechd reads {_LAYOUT_VERSION}"
                )
            if version == 0:
                # One statement at a time: executescript would COMMIT the transaction first.
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(f"PRAGMA user_version={_LAYOUT_VERSION}")
            conn.execute("COMMIT")
        finally:
            conn.close()

    # -- writes -------------------------------------------------------------------------

    async def _write(self, apply: _Apply, size: int = 0) -> Any:
        self._check_open()
        op = _Op(apply, size, self._loop.create_future())
        self._writer.submit(op)
        return await op.future

    async def append(
        self,
        stream: str,
        records: Sequence[AppendRecord],
        *,
        match_seq_num: int | None = None,
    ) -> AppendAck:
        validate_name(stream)
        size = check_batch(records)
        rows = [(_headers_encoder.encode(r.headers), r.body) for r in records]

        def apply(conn: sqlite3.Connection, now: int) -> tuple[AppendAck, list[str]]:
            found = conn.execute(
                "SELECT id, next_seq, touched_ms FROM streams WHERE name=?", (stream,)
            ).fetchone()
            if found is None:
                stream_id, next_seq, touched = None, 0, 0
            else:
                stream_id, next_seq, touched = found
            if match_seq_num is not None and match_seq_num != next_seq:
                raise SeqMismatch(stream, match_seq_num, next_seq)
            ts = max(now, touched)
            if stream_id is None:
                stream_id = conn.execute(
                    "INSERT INTO streams (name, next_seq, touched_ms) VALUES (?, ?, ?)",
                    (stream, len(rows), ts),
                ).lastrowid
            else:
                conn.execute(
                    "UPDATE streams SET next_seq=?, touched_ms=? WHERE id=?",
                    (next_seq + len(rows), ts, stream_id),
                )
            conn.executemany(
                "INSERT INTO records (stream_id, seq, ts, headers, body) VALUES (?, ?, ?, ?, ?)",
                [(stream_id, next_seq + i, ts, h, b) for i, (h, b) in enumerate(rows)],
            )
            return AppendAck(next_seq, next_seq + len(rows), ts), [stream]

        return await self._write(apply, size)

    async def delete(self, stream: str) -> bool:
        validate_name(stream)

        def apply(conn: sqlite3.Connection, now: int) -> tuple[bool, list[str]]:
            found = conn.execute("SELECT id FROM streams WHERE name=?", (stream,)).fetchone()
            if found is None:
                return False, []
            conn.execute("DELETE FROM records WHERE stream_id=?", found)
            conn.execute("DELETE FROM streams WHERE id=?", found)
            return True, [stream]

        return await self._write(apply)

    async def sweep(self, max_age_s: float, prefixes: Sequence[str]) -> int:
        def apply(conn: sqlite3.Connection, now: int) -> tuple[int, list[str]]:
            cutoff = now - int(max_age_s * 1000)
            doomed: list[tuple[int, str]] = []
            for prefix in prefixes:
                doomed += conn.execute(
                    "SELECT id, name FROM streams WHERE name >= ? AND name < ? AND touched_ms < ?",
                    (prefix, prefix + "\x7f", cutoff),
                ).fetchall()
            for stream_id, _ in doomed:
                conn.execute("DELETE FROM records WHERE stream_id=?", (stream_id,))
                conn.execute("DELETE FROM streams WHERE id=?", (stream_id,))
            return len(doomed), [name for _, name in doomed]

        return await self._write(apply)

    # -- reads --------------------------------------------------------------------------

    def _reader(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = _connect(self._db_path)
            conn.execute("PRAGMA query_only=1")
            self._reader_conns.append(conn)
        return conn

    def _read_now(self, stream: str, seq_num: int, max_records: int, max_bytes: int) -> ReadBatch:
        conn = self._reader()
        with _translate_errors(f"reading {stream}"):
            # One read transaction: the tail and the records come from the same snapshot.
            conn.execute("BEGIN")
            try:
                found = conn.execute(
                    "SELECT id, next_seq FROM streams WHERE name=?", (stream,)
                ).fetchone()
                stream_id, tail = found if found is not None else (None, 0)
                if seq_num > tail:
                    raise SeqOutOfRange(stream, seq_num, tail)
                records: list[Record] = []
                if stream_id is not None and seq_num < tail:
                    size = 0
                    rows = conn.execute(
                        "SELECT seq, ts, headers, body FROM records"
                        " WHERE stream_id=? AND seq>=? ORDER BY seq LIMIT ?",
                        (stream_id, seq_num, max_records),
                    )
                    for seq, ts, headers, body in rows:
                        size += len(body) + len(headers)
                        if records and size > max_bytes:
                            break
                        records.append(Record(seq, ts, _headers_decoder.decode(headers), body))
                return ReadBatch(records, tail)
            finally:
                conn.execute("COMMIT")

    async def read(
        self,
        stream: str,
        seq_num: int = 0,
        *,
        max_records: int = 1000,
        max_bytes: int = MAX_BATCH_BYTES,
        wait: float = 0,
    ) -> ReadBatch:
        validate_name(stream)
        if seq_num < 0:
            raise SeqOutOfRange(stream, seq_num, 0)
        max_records = max(1, max_records)
        deadline = self._loop.time() + max(0.0, wait)
        while True:
            self._check_open()
            # Registered before reading, so an append landing between the read and the wait
            # still wakes us.
            waiter = self._register(stream) if wait > 0 else None
            try:
                batch = await self._loop.run_in_executor(
                    self._readers, self._read_now, stream, seq_num, max_records, max_bytes
                )
                remaining = deadline - self._loop.time()
                if batch.records or waiter is None or remaining <= 0:
                    return batch
                try:
                    await asyncio.wait_for(waiter, remaining)
                except asyncio.TimeoutError:
                    return batch
            finally:
                if waiter is not None:
                    self._unregister(stream, waiter)

    async def check_tail(self, stream: str) -> int:
        validate_name(stream)
        return await self._query(
            f"reading {stream}'s tail",
            lambda conn: conn.execute(
                "SELECT coalesce(max(next_seq), 0) FROM streams WHERE name=?", (stream,)
            ).fetchone()[0],
        )

    async def list(self, prefix: str = "", *, limit: int = 1000) -> list[StreamInfo]:
        def query(conn: sqlite3.Connection) -> list[StreamInfo]:
            rows = conn.execute(
                "SELECT name, next_seq, touched_ms FROM streams"
                " WHERE name >= ? AND name < ? ORDER BY name LIMIT ?",
                (prefix, prefix + "\x7f", limit),
            )
            return [StreamInfo(*row) for row in rows]

        return await self._query("listing streams", query)

    async def _query(self, doing: str, query: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run one read-only statement on a reader thread."""
        self._check_open()

        def run() -> Any:
            with _translate_errors(doing):
                return query(self._reader())

        return await self._loop.run_in_executor(self._readers, run)

    # -- wake-ups -----------------------------------------------------------------------

    def _register(self, stream: str) -> asyncio.Future[None]:
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._waiters.setdefault(stream, set()).add(waiter)
        return waiter

    def _unregister(self, stream: str, waiter: asyncio.Future[None]) -> None:
        waiters = self._waiters.get(stream)
        if waiters is not None:
            waiters.discard(waiter)
            if not waiters:
                del self._waiters[stream]

    def _wake(self, streams: list[str] | None) -> None:
        names = list(self._waiters) if streams is None else streams
        for name in names:
            for waiter in self._waiters.get(name, ()):
                if not waiter.done():
                    waiter.set_result(None)

    def _deliver_threadsafe(self, ops: list[_Op], outcomes: _Outcomes, changed: list[str]) -> None:
        """Writer thread, after a round: one hop to the event loop for all its ops."""
        with contextlib.suppress(RuntimeError):  # the loop already closed: nobody is waiting
            self._loop.call_soon_threadsafe(self._deliver, ops, outcomes, changed)

    def _deliver(self, ops: list[_Op], outcomes: _Outcomes, changed: list[str]) -> None:
        for op, (ok, value) in zip(ops, outcomes, strict=True):
            if op.future.done():  # cancelled while the writer had it
                continue
            if ok:
                op.future.set_result(value)
            else:
                op.future.set_exception(value)
        if changed:
            self._wake(changed)

    def _on_wake_datagram(self) -> None:
        self._wake(self._bus.receive())

    async def _poll_data_version(self, version_conn: sqlite3.Connection, last: int) -> None:
        """The fallback wake-up: any commit by any connection changes `data_version`.

        `last` is taken when the store opens, so a commit whose datagram was lost is caught
        even if it landed before the first poll.
        """

        def data_version() -> int:
            with _translate_errors("polling data_version"):
                return version_conn.execute("PRAGMA data_version").fetchone()[0]

        while True:
            await asyncio.sleep(_POLL_INTERVAL_S)
            if not self._waiters:
                continue
            try:
                version = await self._loop.run_in_executor(self._readers, data_version)
            except DurableError:
                log.exception("store: polling for changes failed; waking every reader")
                version = -1
            if version != last:
                self._wake(None)
            last = version

    # -- lifecycle ----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed("the store is closed")

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._poll_task is not None:
            self._poll_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poll_task
        if self._bus.listener is not None:
            self._loop.remove_reader(self._bus.listener.fileno())
        for waiters in self._waiters.values():
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_exception(StoreClosed("the store is closed"))
        await asyncio.to_thread(self._writer.stop)
        await asyncio.to_thread(self._readers.shutdown, wait=True)
        for conn in (*self._reader_conns, self._version_conn):
            conn.close()
        self._bus.close()
