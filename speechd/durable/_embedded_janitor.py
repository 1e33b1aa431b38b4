"""The embedded store's housekeeping, in bounded steps: sweeping, purging, handing space back.

Deleting and trimming are instant for readers (`_embedded`: the `streams` row goes, or its
`first_seq` rises) and leave the records themselves in `garbage` (`_embedded_layout`). The
janitor purges them a step at a time, and then, in a file that can (`auto_vacuum=
INCREMENTAL`), hands free pages back to the filesystem a step at a time, keeping a few for
the next appends. A sweep deletes its expired streams a chunk at a time the same way.

Every step is one background op of the writer (its own transaction, no fsync of its own;
see `_embedded_writer`) bounded in records, bytes or pages, and after each the janitor
pauses at least as long as the step took, so it holds the cross-process write lock at most
about half the time and an append never waits behind more than one step. Steps are
idempotent and re-read `garbage` inside their transaction, so janitors of several processes
(or one restarted after a crash) share the work safely.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ._contract import DurableError, StoreClosed
from ._embedded_writer import Apply

__all__ = ["Janitor", "drop_stream", "sweep_chunk"]

log = logging.getLogger("speechd.durable")

_PURGE_RECORDS = 16  # records purged in one step, at most
_PURGE_BYTES = 256 * 1024  # ... and bytes (the step stops after the record crossing it)
_VACUUM_PAGES = 16  # pages handed back in one step
_FREE_RESERVE_PAGES = 1024  # free pages kept for the next appends (4 MiB of 4 KiB pages)
_MIN_PAUSE_S = 0.001
_RETRY_S = 1.0  # after a failed step


def drop_stream(conn: sqlite3.Connection, stream_id: int, first: int, next_seq: int) -> None:
    """Delete a stream's row (readers see it gone at once) and leave its records to purge."""
    conn.execute("DELETE FROM streams WHERE id=?", (stream_id,))
    mark_garbage(conn, stream_id, first, next_seq)


def mark_garbage(conn: sqlite3.Connection, stream_id: int, start: int, below: int) -> None:
    """Records `start <= seq < below` of `stream_id` are to be purged (merged with any older
    mark: the lower start, the higher end)."""
    if below > start:
        conn.execute(
            "INSERT INTO garbage (stream_id, start, below) VALUES (?, ?, ?)"
            " ON CONFLICT (stream_id) DO UPDATE SET"
            " start=min(start, excluded.start), below=max(below, excluded.below)",
            (stream_id, start, below),
        )


def sweep_chunk(candidates: Sequence[tuple[int, str]], cutoff_ms: int) -> Apply:
    """Delete those of `candidates` (id, name) still untouched since `cutoff_ms`."""

    def apply(conn: sqlite3.Connection, now: int) -> tuple[int, list[str]]:
        removed: list[str] = []
        for stream_id, name in candidates:
            row = conn.execute(
                "SELECT next_seq, touched_ms, first_seq FROM streams WHERE id=?", (stream_id,)
            ).fetchone()
            if row is None or row[1] >= cutoff_ms:  # gone, or appended to since it was listed
                continue
            drop_stream(conn, stream_id, row[2], row[0])
            removed.append(name)
        return len(removed), removed

    return apply


def _purge_step(conn: sqlite3.Connection, now: int) -> tuple[bool, list[str]]:
    """Purge one bounded run of garbage records; False when there is none."""
    row = conn.execute("SELECT stream_id, start, below FROM garbage LIMIT 1").fetchone()
    if row is None:
        return False, []
    stream_id, start, below = row
    # length() of a blob reads its size from the row header, not its pages.
    rows = conn.execute(
        "SELECT seq, length(body) + length(headers) FROM records"
        " WHERE stream_id=? AND seq>=? AND seq<? ORDER BY seq LIMIT ?",
        (stream_id, start, below, _PURGE_RECORDS),
    ).fetchall()
    end = below if len(rows) < _PURGE_RECORDS else rows[-1][0] + 1  # all that is left, or a run
    size = 0
    for seq, length in rows:
        size += length
        if size >= _PURGE_BYTES:
            end = seq + 1
            break
    conn.execute(
        "DELETE FROM records WHERE stream_id=? AND seq>=? AND seq<?", (stream_id, start, end)
    )
    if end >= below:
        conn.execute("DELETE FROM garbage WHERE stream_id=?", (stream_id,))
    else:
        conn.execute("UPDATE garbage SET start=? WHERE stream_id=?", (end, stream_id))
    return True, []


def _vacuum_step(conn: sqlite3.Connection, now: int) -> tuple[bool, list[str]]:
    """Hand up to `_VACUUM_PAGES` free pages back; False when within the reserve."""
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    if free <= _FREE_RESERVE_PAGES:
        return False, []
    # Python's sqlite3 steps a pragma once, and incremental_vacuum frees one page per step:
    # so one page per call.
    for _ in range(min(free - _FREE_RESERVE_PAGES, _VACUUM_PAGES)):
        conn.execute("PRAGMA incremental_vacuum(1)")
    return True, []


# Submits `apply` as a background op of the writer and returns its result.
BackgroundWrite = Callable[[Apply], Awaitable[Any]]
# Reads (no lock) whether records wait to be purged, and how many pages are free.
Due = Callable[[], Awaitable[tuple[bool, int]]]


class Janitor:
    """Runs purge and vacuum steps while there is work, paced; `kick()` says there may be."""

    def __init__(self, write: BackgroundWrite, due: Due, *, vacuums: bool) -> None:
        self._write = write
        self._due = due
        self._vacuums = vacuums
        self._kicked = asyncio.Event()
        self._settling: list[asyncio.Future[None]] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="speechd-store-janitor")
        self.kick()  # garbage left by a process that died, or space to hand back

    def kick(self) -> None:
        self._kicked.set()

    async def settle(self) -> None:
        """Return once a pass that began after this call has found nothing left to do."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._settling.append(waiter)
        self.kick()
        await waiter

    async def pause_after(self, started: float) -> None:
        """Sleep at least as long as the step begun at `started` (loop time) took."""
        took = asyncio.get_running_loop().time() - started
        await asyncio.sleep(max(_MIN_PAUSE_S, took))

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._kicked.wait()
            self._kicked.clear()
            settling, self._settling = self._settling, []
            try:
                while True:
                    garbage, free = await self._due()
                    started = loop.time()
                    did = garbage and await self._write(_purge_step)
                    if not did and self._vacuums and free > _FREE_RESERVE_PAGES:
                        did = await self._write(_vacuum_step)
                    if not did:
                        break
                    await self.pause_after(started)
            except StoreClosed as exc:
                self._fail([*settling, *self._settling], exc)
                return
            except DurableError:
                log.exception("store: housekeeping failed; trying again shortly")
                self._settling[:0] = settling
                loop.call_later(_RETRY_S, self.kick)
                continue
            for waiter in settling:
                if not waiter.done():
                    waiter.set_result(None)

    @staticmethod
    def _fail(waiters: list[asyncio.Future[None]], exc: BaseException) -> None:
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(exc)

    async def close(self) -> None:
        """Stop between steps; what is left stays in `garbage` for the next open."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._fail(self._settling, StoreClosed("the store is closed"))
        self._settling = []
