"""The embedded backend: one SQLite database in a data folder, shared by several processes.

Its parts, each readable alone:

    _embedded_layout   the files and tables (persisted: keep them stable), opening, upgrading
    _embedded_writer   the writer thread: group commit of foreground ops, background ops apart
    _embedded_janitor  sweeping, purging trimmed and deleted records, handing space back, in
                       bounded, paced steps
    _embedded_wake     wake-up datagrams between the processes that have the folder open
    _embedded          this facade: the contract's operations, reads, waiting readers

Reads run on a few reader threads, each with its own connection, one read transaction per
read (so the tail and the records come from one snapshot). A reader waiting at the tail is
woken by a commit of this store (at once), by a datagram from another process (within a
millisecond), or by the `data_version` poll every `_POLL_INTERVAL_S` that covers a lost
datagram and processes in other network namespaces.

Trim and delete are instant for readers: trim raises the stream's `first_seq`, delete drops
its row; their records are purged afterwards by the janitor, in bounded steps. A sweep
selects expired streams on a reader thread (taking no lock), deletes them a chunk at a time,
and returns once the janitor has purged their records.

Limits: one machine, local disk (SQLite over a network filesystem is not safe); one writer at
a time across processes, so write throughput is one disk's fsync rate times the batch size;
the contract's maxima (`CONTRACT_LIMITS`: a record 1 MiB of body and 64 KiB of headers, a
batch 1000 records / 8 MiB, names 512 bytes). Open the store after forking or spawning a
process, never before.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from ._contract import (
    CONTRACT_LIMITS,
    SWEEP_PAGE,
    AppendAck,
    AppendRecord,
    DurableError,
    Limits,
    ReadBatch,
    Record,
    SeqMismatch,
    SeqOutOfRange,
    Spare,
    StoreClosed,
    StreamInfo,
    check_batch,
    validate_name,
)
from ._embedded_janitor import Janitor, drop_stream, mark_garbage, sweep_chunk
from ._embedded_layout import connect, creation_lock, open_layout, translate_errors
from ._embedded_wake import Waiters, WakeBus
from ._embedded_writer import Apply, Op, Outcomes, Writer
from ._polling import PolledStore, Wakeup

__all__ = ["EmbeddedStore"]

log = logging.getLogger("speechd.durable")

_POLL_INTERVAL_S = 0.5
_READ_THREADS = 4
_SWEEP_PAGE = SWEEP_PAGE  # expired streams listed at a time
_SWEEP_CHUNK = 4  # ... and deleted in one step

_headers_encoder = msgspec.msgpack.Encoder()
_headers_decoder = msgspec.msgpack.Decoder(tuple[tuple[bytes, bytes], ...])

_READ_BODIES = (
    "SELECT seq, ts, headers, body FROM records"
    " WHERE stream_id=? AND seq>=? AND seq<? ORDER BY seq LIMIT ?"
)
_READ_HEADERS = (
    "SELECT seq, ts, headers, length(body) FROM records"
    " WHERE stream_id=? AND seq>=? AND seq<? ORDER BY seq LIMIT ?"
)

# A new stream's id: above every id that any row still names, so the records of a deleted
# stream waiting to be purged never meet a new stream's (see `_embedded_layout`).
_NEW_ID = (
    "SELECT max(coalesce((SELECT max(id) FROM streams), 0),"
    " coalesce((SELECT max(stream_id) FROM records), 0),"
    " coalesce((SELECT max(stream_id) FROM garbage), 0)) + 1"
)


class _StreamWakeup:
    """A waiting reader's wake-ups: `Waiters` of one stream."""

    def __init__(self, waiters: Waiters, stream: str) -> None:
        self._waiters = waiters
        self._stream = stream

    def arm(self) -> asyncio.Future[None]:
        return self._waiters.register(self._stream)

    def disarm(self, waiter: asyncio.Future[None]) -> None:
        self._waiters.unregister(self._stream, waiter)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class EmbeddedStore(PolledStore):
    """The stream store in a local data folder. Open with `await EmbeddedStore.open(path)`."""

    def __init__(
        self,
        data_dir: Path,
        writer: Writer,
        bus: WakeBus,
        version_conn: sqlite3.Connection,
        *,
        vacuums: bool,
    ) -> None:
        """Use `open`, which makes the files and connections off the event loop."""
        self._data_dir = data_dir
        self._db_path = data_dir / "store.db"
        self._loop = asyncio.get_running_loop()
        self._closed = False
        self._waiters = Waiters()
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
        self._janitor = Janitor(self._background, self._housekeeping_due, vacuums=vacuums)

    @classmethod
    async def open(cls, data_dir: str | os.PathLike[str]) -> EmbeddedStore:
        path = Path(data_dir)
        writer, bus, version_conn, version, vacuums = await asyncio.to_thread(cls._open_files, path)
        if not vacuums:
            log.info(
                "store: %s was made before speechd handed space back; it reuses freed pages"
                " but never shrinks (docs: operations/store.md)",
                path / "store.db",
            )
        store = cls(path, writer, bus, version_conn, vacuums=vacuums)
        writer.start()
        if bus.listener is not None:
            store._loop.add_reader(bus.listener.fileno(), store._on_wake_datagram)
        store._poll_task = asyncio.create_task(store._poll_data_version(version_conn, version))
        store._janitor.start()
        return store

    @staticmethod
    def _open_files(data_dir: Path) -> tuple[Writer, WakeBus, sqlite3.Connection, int, bool]:
        with translate_errors(f"opening the store in {data_dir}"):
            data_dir.mkdir(parents=True, exist_ok=True)
            with creation_lock(data_dir):
                vacuums = open_layout(data_dir / "store.db")
            version_conn = connect(data_dir / "store.db")
            try:
                version = version_conn.execute("PRAGMA data_version").fetchone()[0]
                writer = Writer(data_dir / "store.db")
            except BaseException:
                version_conn.close()
                raise
            try:
                bus = WakeBus(data_dir)
            except BaseException:
                writer.close()
                version_conn.close()
                raise
        return writer, bus, version_conn, version, vacuums

    @property
    def limits(self) -> Limits:
        return CONTRACT_LIMITS

    # -- writes -------------------------------------------------------------------------

    async def _write(self, apply: Apply, size: int = 0, *, background: bool = False) -> Any:
        self._check_open()
        op = Op(apply, size, self._loop.create_future(), background=background)
        self._writer.submit(op)
        return await op.future

    async def _background(self, apply: Apply) -> Any:
        return await self._write(apply, background=True)

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
                stream_id = conn.execute(_NEW_ID).fetchone()[0]
                conn.execute(
                    "INSERT INTO streams (id, name, next_seq, touched_ms) VALUES (?, ?, ?, ?)",
                    (stream_id, stream, len(rows), ts),
                )
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

    async def trim(self, stream: str, before_seq: int) -> int:
        validate_name(stream)

        def apply(conn: sqlite3.Connection, now: int) -> tuple[int, list[str]]:
            found = conn.execute(
                "SELECT id, next_seq, first_seq FROM streams WHERE name=?", (stream,)
            ).fetchone()
            stream_id, tail, first = found if found is not None else (None, 0, 0)
            if before_seq < 0 or before_seq > tail:
                raise SeqOutOfRange(stream, before_seq, tail, first)
            if stream_id is None or before_seq <= first:
                return first, []
            conn.execute("UPDATE streams SET first_seq=? WHERE id=?", (before_seq, stream_id))
            mark_garbage(conn, stream_id, first, before_seq)
            return before_seq, []  # a trim wakes nobody: waiting readers are at the tail

        first = await self._write(apply)
        self._janitor.kick()
        return first

    async def delete(self, stream: str) -> bool:
        validate_name(stream)

        def apply(conn: sqlite3.Connection, now: int) -> tuple[bool, list[str]]:
            found = conn.execute(
                "SELECT id, first_seq, next_seq FROM streams WHERE name=?", (stream,)
            ).fetchone()
            if found is None:
                return False, []
            drop_stream(conn, *found)
            return True, [stream]

        existed = await self._write(apply)
        if existed:
            self._janitor.kick()
        return existed

    async def sweep(
        self, max_age_s: float, prefixes: Sequence[str], *, spare: Spare | None = None
    ) -> int:
        self._check_open()
        cutoff = _now_ms() - int(max_age_s * 1000)
        removed = 0
        for prefix in dict.fromkeys(prefixes):
            after = ""
            while page := await self._expired(prefix, after, cutoff):
                after = page[-1][1]
                if spare is not None:
                    kept = await spare([name for _, name in page])
                    page = [(sid, name) for sid, name in page if name not in kept]
                for i in range(0, len(page), _SWEEP_CHUNK):
                    started = self._loop.time()
                    removed += await self._background(
                        sweep_chunk(page[i : i + _SWEEP_CHUNK], cutoff)
                    )
                    await self._janitor.pause_after(started)
        if removed:
            await self._janitor.settle()
        return removed

    async def _housekeeping_due(self) -> tuple[bool, int]:
        """(whether records wait to be purged, free pages): a read, so an idle janitor takes
        no lock."""
        return await self._query(
            "looking for housekeeping",
            lambda conn: (
                conn.execute("SELECT 1 FROM garbage LIMIT 1").fetchone() is not None,
                conn.execute("PRAGMA freelist_count").fetchone()[0],
            ),
        )

    async def _expired(self, prefix: str, after: str, cutoff: int) -> list[tuple[int, str]]:
        """Up to `_SWEEP_PAGE` streams under `prefix`, named after `after`, untouched since
        `cutoff` (a read: no lock taken)."""
        return await self._query(
            "listing expired streams",
            lambda conn: conn.execute(
                "SELECT id, name FROM streams WHERE name >= ? AND name < ? AND name > ?"
                " AND touched_ms < ? ORDER BY name LIMIT ?",
                (prefix, prefix + "\x7f", after, cutoff, _SWEEP_PAGE),
            ).fetchall(),
        )

    # -- reads --------------------------------------------------------------------------

    def _reader(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = connect(self._db_path)
            conn.execute("PRAGMA query_only=1")
            self._reader_conns.append(conn)
        return conn

    def _read_rows(
        self, stream: str, seq_num: int, max_records: int, max_bytes: int, bodies: bool
    ) -> ReadBatch:
        conn = self._reader()
        with translate_errors(f"reading {stream}"):
            # One read transaction: the tail and the records come from the same snapshot.
            conn.execute("BEGIN")
            try:
                found = conn.execute(
                    "SELECT id, next_seq, first_seq FROM streams WHERE name=?", (stream,)
                ).fetchone()
                stream_id, tail, first = found if found is not None else (None, 0, 0)
                if seq_num > tail or seq_num < first:
                    raise SeqOutOfRange(stream, seq_num, tail, first)
                records: list[Record] = []
                if stream_id is not None and seq_num < tail:
                    size = 0
                    # length() of a blob reads its size from the row header, not its pages:
                    # a read without bodies never touches them.
                    rows = conn.execute(
                        _READ_BODIES if bodies else _READ_HEADERS,
                        (stream_id, seq_num, tail, max_records),
                    )
                    for seq, ts, raw, body in rows:
                        size += len(raw) + (len(body) if bodies else 0)
                        if records and size > max_bytes:
                            break
                        headers = _headers_decoder.decode(raw)
                        if bodies:
                            records.append(Record(seq, ts, headers, body))
                        else:  # `body` is its length
                            records.append(Record(seq, ts, headers, b"", omitted=body))
                return ReadBatch(records, tail)
            finally:
                conn.execute("COMMIT")

    async def _read_now(
        self, stream: str, seq_num: int, max_records: int, max_bytes: int, bodies: bool
    ) -> ReadBatch:
        return await self._loop.run_in_executor(
            self._readers, self._read_rows, stream, seq_num, max_records, max_bytes, bodies
        )

    @contextlib.asynccontextmanager
    async def _wakeups(self, stream: str) -> AsyncIterator[Wakeup]:
        yield _StreamWakeup(self._waiters, stream)

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
                "SELECT name, next_seq, touched_ms, first_seq FROM streams"
                " WHERE name >= ? AND name < ? ORDER BY name LIMIT ?",
                (prefix, prefix + "\x7f", limit),
            )
            return [StreamInfo(*row) for row in rows]

        return await self._query("listing streams", query)

    async def _query(self, doing: str, query: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run one read-only statement on a reader thread."""
        self._check_open()

        def run() -> Any:
            with translate_errors(doing):
                return query(self._reader())

        return await self._loop.run_in_executor(self._readers, run)

    # -- wake-ups -----------------------------------------------------------------------

    def _deliver_threadsafe(self, ops: list[Op], outcomes: Outcomes, changed: list[str]) -> None:
        """Writer thread, after a round: one hop to the event loop for all its ops."""
        with contextlib.suppress(RuntimeError):  # the loop already closed: nobody is waiting
            self._loop.call_soon_threadsafe(self._deliver, ops, outcomes, changed)

    def _deliver(self, ops: list[Op], outcomes: Outcomes, changed: list[str]) -> None:
        for op, (ok, value) in zip(ops, outcomes, strict=True):
            if op.future.done():  # cancelled while the writer had it
                continue
            if ok:
                op.future.set_result(value)
            else:
                op.future.set_exception(value)
        if changed:
            self._waiters.wake(changed)

    def _on_wake_datagram(self) -> None:
        self._waiters.wake(self._bus.receive())

    async def _poll_data_version(self, version_conn: sqlite3.Connection, last: int) -> None:
        """The fallback wake-up: any commit by any connection changes `data_version`.

        `last` is taken when the store opens, so a commit whose datagram was lost is caught
        even if it landed before the first poll.
        """

        def data_version() -> int:
            with translate_errors("polling data_version"):
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
                self._waiters.wake(None)
            last = version

    # -- lifecycle ----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed("the store is closed")

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._janitor.close()
        if self._poll_task is not None:
            self._poll_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poll_task
        if self._bus.listener is not None:
            self._loop.remove_reader(self._bus.listener.fileno())
        self._waiters.fail(StoreClosed("the store is closed"))
        await asyncio.to_thread(self._writer.stop)
        await asyncio.to_thread(self._readers.shutdown, wait=True)
        for conn in (*self._reader_conns, self._version_conn):
            conn.close()
        self._bus.close()
