"""What the suite's other processes run. Each opens the store from its URL alone, so these work
for any backend. Run by `multiprocessing` (spawn) or as `python -m tests.durable._procs`.

Nothing here imports pytest: a spawned child imports this module and nothing more.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time
import zlib
from multiprocessing.synchronize import Barrier
from typing import Any

from speechd.durable import AppendRecord, SeqMismatch, Store, open_store


def _slow_poll(poll_interval: float | None) -> None:
    """Embedded only: make the data_version fallback too slow to matter in a test."""
    if poll_interval is not None:
        from speechd.durable import _embedded

        _embedded._POLL_INTERVAL_S = poll_interval


# -- races (multiprocessing targets) ------------------------------------------------------------


def claim_race(
    url: str, streams: list[str], who: int, tasks: int, barrier: Barrier, results: Any
) -> None:
    """Claim every stream from `tasks` tasks at once, after every process is ready."""

    async def main() -> list[tuple[str, str, int]]:
        async with await open_store(url) as store:
            barrier.wait(60)

            async def claim(stream: str, task: int) -> tuple[str, str, int]:
                body = f"{who}.{task}".encode()
                try:
                    ack = await store.append(stream, [AppendRecord(body)], match_seq_num=0)
                except SeqMismatch as lost:
                    return (stream, "lost", lost.next_seq)
                return (stream, body.decode(), ack.start_seq)

            return await asyncio.gather(*(claim(s, t) for s in streams for t in range(tasks)))

    results.put((who, asyncio.run(main())))


def append_race(
    url: str, stream: str, who: int, tasks: int, count: int, barrier: Barrier, results: Any
) -> None:
    """Append `count` records from each of `tasks` tasks; report each acknowledged seq."""

    async def main() -> list[tuple[str, int]]:
        async with await open_store(url) as store:
            barrier.wait(60)

            async def appender(task: int) -> list[tuple[str, int]]:
                acked = []
                for i in range(count):
                    body = f"{who}.{task}.{i}"
                    ack = await store.append(stream, [AppendRecord(body.encode())])
                    acked.append((body, ack.start_seq))
                return acked

            done = await asyncio.gather(*(appender(t) for t in range(tasks)))
            return [pair for acked in done for pair in acked]

    results.put((who, asyncio.run(main())))


def open_race(url: str, who: int, barrier: Barrier, results: Any) -> None:
    """Open a (fresh) store at the same moment as the others, then append."""

    async def main() -> int:
        barrier.wait(60)
        async with await open_store(url) as store:
            ack = await store.append("opened", [AppendRecord(b"%d" % who)])
            return ack.start_seq

    try:
        results.put((who, asyncio.run(main())))
    except Exception as exc:
        results.put((who, repr(exc)))


# -- followers (multiprocessing targets) ----------------------------------------------------


def echo_follower(
    url: str, stream: str, count: int, results: Any, poll_interval: float | None = None
) -> None:
    """Follow `stream`; put ("ready", None) when following, then (seq, time_ns) per record."""
    _slow_poll(poll_interval)

    async def main() -> None:
        async with await open_store(url) as store:
            results.put(("ready", None))
            seen = 0
            async for record in store.follow(stream):
                results.put((record.seq_num, time.time_ns()))
                seen += 1
                if seen == count:
                    return

    asyncio.run(main())


# -- the crash appender (a subprocess: its output is a pipe the parent reads) ---------------


def _write_line(line: str) -> None:
    # One write(2) of less than PIPE_BUF bytes: a line is never torn, even by SIGKILL.
    data = (line + "\n").encode()
    assert len(data) < 4096
    os.write(1, data)


_SIZES = [0, 1, 100, 4096, 32 * 1024, 200 * 1024, 1024 * 1024]
_WEIGHTS = [10, 10, 30, 25, 17, 6, 2]


def _body(rng: random.Random) -> bytes:
    (size,) = rng.choices(_SIZES, _WEIGHTS)
    return rng.randbytes(rng.randint(size // 2, size))


async def _crash_append(url: str, tag: str, seed: int) -> None:
    """Append forever from three tasks; print one line per acknowledged batch:

    `ack <stream> <start> <next> <crc32 of each body, comma-separated>`
    """
    rng = random.Random(seed)
    store: Store = await open_store(url)
    _write_line("ready")
    batches = 0

    def batch(stream_tag: str) -> list[AppendRecord]:
        nonlocal batches
        batches += 1
        n = rng.randint(1, 4)
        records = []
        for i in range(n):
            body = _body(rng)
            headers = (
                (b"crc", b"%08x" % zlib.crc32(body)),
                (b"batch", f"{tag}.{stream_tag}.{batches}".encode()),
                (b"n", b"%d" % n),
                (b"i", b"%d" % i),
            )
            records.append(AppendRecord(body, headers))
        return records

    def report(stream: str, start: int, nxt: int, records: list[AppendRecord]) -> None:
        crcs = ",".join(f"{zlib.crc32(r.body):08x}" for r in records)
        _write_line(f"ack {stream} {start} {nxt} {crcs}")

    async def shared() -> None:
        while True:
            records = batch("shared")
            ack = await store.append("crash/shared", records)
            report("crash/shared", ack.start_seq, ack.next_seq, records)

    async def conditional() -> None:
        tail = await store.check_tail("crash/conditional")
        while True:
            records = batch("conditional")
            ack = await store.append("crash/conditional", records, match_seq_num=tail)
            report("crash/conditional", ack.start_seq, ack.next_seq, records)
            tail = ack.next_seq

    async def many_streams() -> None:
        while True:
            stream = f"crash/many/{rng.randrange(50)}"
            records = batch("many")
            ack = await store.append(stream, records)
            report(stream, ack.start_seq, ack.next_seq, records)

    await asyncio.gather(shared(), shared(), conditional(), many_streams())


# -- two stores in a network namespace of their own (run under `unshare -rn`) --------------


async def _namespace_pair(url: str) -> None:
    """Open a follower and a writer here; on "go" (stdin), follow `t` while the writer
    appends to it, and print how long the follower took to wake (`woke <s>`, or `timeout`).

    The data_version poll is off, so only a datagram from the writer can wake the follower:
    its registration must have survived the refused datagrams of the other namespace."""
    from speechd.durable import _embedded

    _embedded._POLL_INTERVAL_S = 600.0
    async with await open_store(url) as follower, await open_store(url) as writer:
        _write_line("ready")
        await asyncio.to_thread(sys.stdin.readline)
        poll = asyncio.ensure_future(follower.read("t", 0, wait=20))
        await asyncio.sleep(0.05)
        await writer.append("t", [AppendRecord(b"x")])
        started = time.monotonic()
        batch = await poll
        took = time.monotonic() - started
        _write_line(f"woke {took:.3f}" if batch.records else "timeout")


def main(argv: list[str]) -> None:
    command, *args = argv
    if command == "crash-append":
        url, tag, seed = args
        asyncio.run(_crash_append(url, tag, int(seed)))
    elif command == "namespace-pair":
        (url,) = args
        asyncio.run(_namespace_pair(url))
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
