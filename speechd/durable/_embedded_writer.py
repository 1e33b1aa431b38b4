"""The embedded store's writer: one thread per open store, one transaction per round.

Foreground writes (appends, claims, trims, deletes) queued while the previous transaction
committed are applied together in the next one (group commit), so durability costs one WAL
fsync per round, not per append. An op is acknowledged only after COMMIT returned, and a
round's outcomes reach the event loop in one hop. Each op runs in its own savepoint, so one
failed condition never undoes its neighbours. An op cancelled before the writer takes it is
not applied; one cancelled later is applied, and its caller does not hear.

Background ops (the housekeeping of `_embedded_janitor`: a sweep's deletions, purging
trimmed or deleted records, handing pages back) each get a transaction of their own, never
shared with foreground ops, with `synchronous=NORMAL`: no fsync of their own. They need none:
losing one to a power cut only means doing it again, and the WAL is sequential, so the next
foreground commit's fsync makes every earlier background transaction durable too. A caller
keeps each background op small, so a foreground write that arrives meanwhile waits for a
bounded amount of work, never for a whole sweep. Their transactions do not checkpoint on
their own (SQLite's automatic checkpoint runs inside the COMMIT that crosses ~4 MB of WAL,
under the write lock); instead each is followed, once the write lock is released, by a
passive checkpoint of what it wrote. Otherwise the WAL a sweep writes is checkpointed inside
some append's commit, and that append pays for it (the sweep line of `loadtest.bench_store`
went from 1.6-1.8x the quiet p99 to 1.0-1.1x with this, on the shared test machine).

Writers of different processes take turns on the flock of `write.lock` (woken at once), then
on SQLite's write lock. Foreground checkpoints are SQLite's automatic ones (every ~4 MB of
WAL, inside the COMMIT that crosses it); running them on another thread was measured slower
for appends (the WAL grows instead of being rewound).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._contract import DurableError
from ._embedded_layout import connect

__all__ = ["Apply", "Op", "Outcomes", "Writer"]

log = logging.getLogger("speechd.durable")

_MAX_GROUP_OPS = 1024
_MAX_GROUP_BYTES = 16 * 1024 * 1024
_AUTOCHECKPOINT_PAGES = 1000  # SQLite's default, for foreground transactions

# Applies one write inside a transaction at time `now` (ms); returns (result, changed streams).
Apply = Callable[[sqlite3.Connection, int], tuple[Any, list[str]]]

# Per op (ok, result or exception), in order.
Outcomes = list[tuple[bool, Any]]

_STOP = object()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Op:
    """One queued write. `future` belongs to the store's event loop; the writer thread only
    reads `cancelled()` and hands the outcome back through one `call_soon_threadsafe` per
    round."""

    __slots__ = ("apply", "background", "future", "size")

    def __init__(
        self, apply: Apply, size: int, future: asyncio.Future[Any], *, background: bool = False
    ) -> None:
        self.apply = apply
        self.size = size
        self.future = future
        self.background = background


class Writer(threading.Thread):
    """Owns the write connection; commits the queued ops round by round.

    After each round it calls `deliver(ops, outcomes, changed streams)` (which hands them to
    the event loop) and then `broadcast(changed streams)` (the other processes' wake-up).

    The thread must outlive every failure: an op whose caller went away (a cancelled append)
    is skipped if it has not started, and any error fails that round's ops, never the thread.
    """

    def __init__(self, path: Path) -> None:
        super().__init__(name="speechd-store-writer", daemon=True)
        self._conn = connect(path)
        self._lock_fd = os.open(path.with_name("write.lock"), os.O_RDWR | os.O_CREAT, 0o644)
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.deliver: Callable[[list[Op], Outcomes, list[str]], None] = lambda *args: None
        self.broadcast: Callable[[list[str]], None] = lambda streams: None

    @property
    def connection(self) -> sqlite3.Connection:
        """The write connection (for the tests' look at its settings)."""
        return self._conn

    def close(self) -> None:
        """Close the connection of a writer that was never started."""
        self._conn.close()
        os.close(self._lock_fd)

    def submit(self, op: Op) -> None:
        self._queue.put(op)

    def stop(self) -> None:
        """Apply what is queued, then end the thread."""
        self._queue.put(_STOP)
        self.join()

    def run(self) -> None:
        held: Any = None  # taken from the queue but left for the next round
        while True:
            first = held if held is not None else self._queue.get()
            held = None
            if first is _STOP:
                break
            # An op cancelled before we take it (its caller gave up) is dropped unapplied.
            # One cancelled later is applied; its caller just never hears.
            if first.future.cancelled():
                continue
            if first.background:
                self._round([first], background=True)
                continue
            ops: list[Op] = [first]
            size = first.size
            while len(ops) < _MAX_GROUP_OPS:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not _STOP and item.future.cancelled():
                    continue
                if item is _STOP or item.background or size + item.size > _MAX_GROUP_BYTES:
                    held = item
                    break
                ops.append(item)
                size += item.size
            self._round(ops, background=False)
        self.close()

    def _round(self, ops: list[Op], *, background: bool) -> None:
        outcomes, changed = self._commit(ops, background=background)
        try:
            self.deliver(ops, outcomes, changed)
        except Exception:
            log.exception("store: handing results back to the event loop failed")
        if changed:
            try:
                self.broadcast(changed)
            except Exception:
                # The writes are durable and acknowledged; only a wake-up was lost, and the
                # readers' data_version poll covers that.
                log.exception("store: waking the other processes after a commit failed")

    def _commit(self, ops: list[Op], *, background: bool) -> tuple[Outcomes, list[str]]:
        outcomes: Outcomes = []
        changed: list[str] = []
        try:
            # Writers in other processes queue on this flock, and each is woken the moment the
            # holder is done; waiting on SQLite's own lock instead means its busy handler's
            # sleeps (1, 2, 5 ... 100 ms), which cost several writer processes most of their
            # throughput. The flock is released when the holder dies.
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            if background:
                self._conn.execute("PRAGMA synchronous=NORMAL")
                self._conn.execute("PRAGMA wal_autocheckpoint=0")
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
            if background:
                with contextlib.suppress(sqlite3.Error):
                    self._conn.execute("PRAGMA synchronous=FULL")
                    self._conn.execute(f"PRAGMA wal_autocheckpoint={_AUTOCHECKPOINT_PAGES}")
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        if background:
            # Outside the write lock: SQLite checkpoints alongside other writers.
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        return outcomes, changed
