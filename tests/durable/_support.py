"""Helpers the suite's test modules share (not tests, and not run in child processes)."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from speechd.durable import AppendRecord, Record, Store

SPAWN = multiprocessing.get_context("spawn")

# The `open_handle` fixture: opens one more handle on the test's store.
OpenHandle = Callable[[], Awaitable[Store]]
CHILD_TIMEOUT_S = 120


def rec(body: bytes = b"", *headers: tuple[bytes, bytes]) -> AppendRecord:
    return AppendRecord(body=body, headers=tuple(headers))


async def read_all(store: Store, stream: str) -> list[Record]:
    """Every record of `stream`, read batch by batch from seq 0; seqs checked dense."""
    records: list[Record] = []
    while batch := (await store.read(stream, len(records))).records:
        assert [r.seq_num for r in batch] == list(range(len(records), len(records) + len(batch)))
        records += batch
    return records


@contextmanager
def processes(target: Any, args: list[tuple[Any, ...]]) -> Iterator[list[Any]]:
    """Start one spawned process per argument tuple; kill whatever is left at the end."""
    procs = [SPAWN.Process(target=target, args=a, daemon=True) for a in args]
    for proc in procs:
        proc.start()
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
            proc.join(10)


async def results_of(queue: Any, count: int) -> list[Any]:
    """`count` results from the children, without blocking the event loop."""
    return [await asyncio.to_thread(queue.get, True, CHILD_TIMEOUT_S) for _ in range(count)]


async def follow_round_trips(
    store: Store, queue: Any, stream: str, count: int, first_seq: int = 0
) -> list[float]:
    """Append `count` records one at a time; the seconds from each ack until a child following
    `stream` (`_procs.echo_follower`) reports it."""
    latencies = []
    for seq in range(first_seq, first_seq + count):
        await asyncio.sleep(0.01)
        await store.append(stream, [AppendRecord(b"%d" % seq)])
        acked = time.monotonic()
        echoed_seq, _ = await asyncio.to_thread(queue.get, True, 30)
        latencies.append(time.monotonic() - acked)
        assert echoed_seq == seq
    return latencies
