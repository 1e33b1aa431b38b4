"""Benchmark the store: durable append throughput, cross-process follow latency, and appends
while a retention sweep runs.

    python -m loadtest.bench_store [--dir DIR] [--records N] [--record-kib K] [--follow N]
                                   [--sections throughput,follow,sweep]
                                   [--sweep-backends embedded,nats] [--sweep-casts 1000]

Prints, in one run and in one folder on one disk:

* the baseline: a plain file opened O_APPEND, one write + fdatasync per record;
* append throughput, 32 KiB records across 1,000 streams, durability on (every append is
  acknowledged after fsync): one writer awaiting each append in turn, 8 writer tasks sharing
  one store (the writer thread group-commits), and 8 writer processes (for information);
* cross-process follow latency: process A appends and notes the time the append was
  acknowledged, process B follows the stream and notes when each record reaches it; both
  read time.time_ns(), the one clock they share.

* the sweep line, per backend (the embedded store, and NATS on a local `nats-server` with the
  settings docs/scale-out.md recommends): a process appends 16 KiB records at a live cast's pace
  (one every 5 ms, as a worker appends chunks) and times each append, first with nothing
  else going on, then while this process (as the api does) sweeps 1,000 expired casts of
  8 records; p99 of each, and their ratio. The figures are the appender's, from its own
  clock; the sweep's duration and, for the embedded store, the data file before and after
  are printed beside them.

It is a measurement, not a test: it prints figures and the ratios against the targets
(>= 1x the baseline with one writer, >= 3x with 8, follow p99 <= 10 ms, sweep p99 <= 1.5x
the p99 without) and exits 0. The load average is printed before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.nats import NatsServer
from speechd.durable import AppendRecord, Store, open_store

STREAMS = 1000
MIB = 1024 * 1024
LIVE_KIB = 16
LIVE_PACE_S = 0.005


@dataclass(frozen=True)
class Throughput:
    records: int
    record_bytes: int
    seconds: float

    @property
    def per_s(self) -> float:
        return self.records / self.seconds

    @property
    def mib_per_s(self) -> float:
        return self.records * self.record_bytes / MIB / self.seconds

    def line(self, label: str, baseline: Throughput | None = None) -> str:
        ratio = f"  {self.per_s / baseline.per_s:5.2f}x baseline" if baseline else ""
        return (
            f"  {label:<44} {self.per_s:9.0f} records/s {self.mib_per_s:8.1f} MiB/s"
            f"  ({self.records} in {self.seconds:.2f} s){ratio}"
        )


class Baseline:
    """The plain-file floor: a file opened O_APPEND, one write and one fdatasync per record."""

    def __init__(self, folder: Path, size: int) -> None:
        self._path = folder / "baseline.log"
        self._fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
        self._payload = os.urandom(size)

    def run(self, records: int) -> float:
        started = time.perf_counter()
        for _ in range(records):
            os.write(self._fd, self._payload)
            os.fdatasync(self._fd)
        return time.perf_counter() - started

    def close(self) -> None:
        os.close(self._fd)
        self._path.unlink()


def _bodies(count: int, size: int) -> list[bytes]:
    # Distinct bodies (a counter over random bytes), made before the clock starts.
    base = os.urandom(size)
    return [i.to_bytes(8, "little") + base[8:] for i in range(count)]


class StoreWriters:
    """`tasks` asyncio tasks sharing one open store, each awaiting its appends in turn."""

    def __init__(self, store: Store, size: int, tasks: int) -> None:
        self._store = store
        self._size = size
        self._tasks = tasks
        self._appended = 0

    async def run(self, records: int) -> float:
        bodies = _bodies(records, self._size)
        offset = self._appended
        self._appended += records

        async def writer(task: int) -> None:
            for i in range(task, records, self._tasks):
                stream = f"bench/{(offset + i) % STREAMS}"
                await self._store.append(stream, [AppendRecord(bodies[i])])

        started = time.perf_counter()
        await asyncio.gather(*(writer(t) for t in range(self._tasks)))
        return time.perf_counter() - started


def _writer_process(url: str, records: int, size: int, who: int, barrier: Any, out: Any) -> None:
    async def main() -> None:
        bodies = _bodies(records, size)
        async with await open_store(url) as store:
            await store.append("bench/warm-up", [AppendRecord(b"")])
            barrier.wait(60)
            started = time.time()
            for i in range(records):
                stream = f"bench/{(who * records + i) % STREAMS}"
                await store.append(stream, [AppendRecord(bodies[i])])
            out.put((started, time.time()))

    asyncio.run(main())


def writer_processes(url: str, records: int, size: int, procs: int) -> float:
    """`procs` spawned processes, each with its own handle on the store, `records` in all.

    Timed from the first one starting (after all opened the store) to the last one ending."""
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(procs), ctx.Queue()
    per_proc = records // procs
    children = [
        ctx.Process(target=_writer_process, args=(url, per_proc, size, who, barrier, out))
        for who in range(procs)
    ]
    for child in children:
        child.start()
    spans = [out.get(timeout=600) for _ in children]
    for child in children:
        child.join()
    return max(end for _, end in spans) - min(start for start, _ in spans)


def _follower_process(url: str, stream: str, count: int, ready: Any, out: Any) -> None:
    async def main() -> None:
        woke: list[int] = []
        async with await open_store(url) as store:
            ready.set()
            async for record in store.follow(stream):
                woke.append(time.time_ns())
                if record.seq_num == count - 1:
                    break
        out.put(woke)

    asyncio.run(main())


async def follow_latency(url: str, count: int, size: int) -> tuple[list[float], list[float]]:
    """Milliseconds from each append's call, and from its ack, to the follower waking."""
    ctx = multiprocessing.get_context("spawn")
    ready, out = ctx.Event(), ctx.Queue()
    follower = ctx.Process(target=_follower_process, args=(url, "bench/follow", count, ready, out))
    follower.start()
    called: list[int] = []
    acked: list[int] = []
    body = os.urandom(size)
    async with await open_store(url) as store:
        await asyncio.to_thread(ready.wait, 60)
        await asyncio.sleep(0.2)  # let it reach its long-poll
        for _ in range(count):
            called.append(time.time_ns())
            await store.append("bench/follow", [AppendRecord(body)])
            acked.append(time.time_ns())
            await asyncio.sleep(0.002)  # a live cast's pace, not a flood
    woke = await asyncio.to_thread(out.get, True, 120)
    await asyncio.to_thread(follower.join, 30)
    from_call = [(w - c) / 1e6 for w, c in zip(woke, called, strict=True)]
    from_ack = [(w - a) / 1e6 for w, a in zip(woke, acked, strict=True)]
    return from_call, from_ack


def _live_appender(url: str, size: int, ready: Any, stop: Any, out: Any) -> None:
    """Append to `bench/live` at a live cast's pace until `stop`; put [(acked ns, ms)]."""

    async def main() -> None:
        body = os.urandom(size)
        timed: list[tuple[int, float]] = []
        async with await open_store(url) as store:
            await store.append("bench/live", [AppendRecord(b"")])
            ready.set()
            while not stop.is_set():
                started = time.perf_counter()
                await store.append("bench/live", [AppendRecord(body)])
                timed.append((time.time_ns(), (time.perf_counter() - started) * 1000))
                await asyncio.sleep(LIVE_PACE_S)
        out.put(timed)

    asyncio.run(main())


@dataclass(frozen=True)
class SweepResult:
    quiet: list[float]  # append latencies (ms) with nothing else going on
    sweeping: list[float]  # ... while the sweep ran
    appended: int  # the live appender's appends in all
    sweep_s: float
    removed: int
    file_before: tuple[int, int] | None  # the embedded store's (store.db, its WAL), bytes
    file_after: tuple[int, int] | None


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else float("nan")


def _db_size(folder: Path | None) -> tuple[int, int] | None:
    if folder is None:
        return None
    db, wal = folder / "store.db", folder / "store.db-wal"
    return db.stat().st_size, wal.stat().st_size if wal.exists() else 0


async def sweep_latency(
    url: str, casts: int, records: int, size: int, folder: Path | None
) -> SweepResult:
    """Live appends in another process, quiet and then while `casts` expired casts are swept."""
    ctx = multiprocessing.get_context("spawn")
    ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    async with await open_store(url) as store:
        body = os.urandom(size)
        room = asyncio.Semaphore(32)

        async def cast(i: int) -> None:
            async with room:
                await store.append(f"pub/casts/expired-{i:05d}", [AppendRecord(body)] * records)

        await asyncio.gather(*(cast(i) for i in range(casts)))
        await asyncio.sleep(1.1)  # every cast is now over a second old
        file_before = _db_size(folder)
        appender = ctx.Process(target=_live_appender, args=(url, LIVE_KIB * 1024, ready, stop, out))
        appender.start()
        try:
            await asyncio.to_thread(ready.wait, 60)
            await asyncio.sleep(0.5)  # past its first appends
            quiet_from = time.time_ns()
            await asyncio.sleep(3.0)
            quiet_to = sweep_from = time.time_ns()
            started = time.perf_counter()
            removed = await store.sweep(1.0, ["pub/casts/"])
            sweep_s = time.perf_counter() - started
            sweep_to = time.time_ns()
            stop.set()
            timed = await asyncio.to_thread(out.get, True, 120)
        finally:
            stop.set()
            await asyncio.to_thread(appender.join, 30)
            if appender.is_alive():
                appender.kill()
    quiet = [ms for at, ms in timed if quiet_from <= at < quiet_to]
    sweeping = [ms for at, ms in timed if sweep_from <= at <= sweep_to]
    return SweepResult(quiet, sweeping, len(timed), sweep_s, removed, file_before, _db_size(folder))


def sweep_section(folder: Path, backends: list[str], casts: int) -> None:
    records, record_kib = 8, 8
    print(
        f"appends while a sweep runs: {casts} expired casts of {records} x {record_kib} KiB"
        f" swept by this process; another appends {LIVE_KIB} KiB every"
        f" {LIVE_PACE_S * 1000:.0f} ms (load average {os.getloadavg()[0]:.2f})"
    )
    for backend in backends:
        server = None
        data: Path | None = None
        if backend == "embedded":
            data = folder / "sweep"
            url = str(data)
        elif backend == "nats":
            try:
                server = NatsServer(folder / "nats").start()
            except RuntimeError as exc:  # no nats-server here
                print(f"  {backend}: skipped ({exc})")
                continue
            url = f"{server.url}/?namespace=bench"
        else:
            print(f"  {backend}: unknown backend, skipped")
            continue
        try:
            result = asyncio.run(sweep_latency(url, casts, records, record_kib * 1024, data))
        finally:
            if server is not None:
                server.stop()
        quiet, sweeping = _p99(result.quiet), _p99(result.sweeping)
        ratio = sweeping / quiet
        print(
            f"  {backend:<9} append p99 quiet {quiet:7.2f} ms (n={len(result.quiet)})"
            f"  while sweeping {sweeping:7.2f} ms (n={len(result.sweeping)})"
            f"  ratio {ratio:5.2f}x  {'met' if ratio <= 1.5 else 'MISSED'} (target <= 1.5x)"
        )
        line = f"            sweep of {result.removed} casts took {result.sweep_s:.2f} s"
        if result.file_before is not None and result.file_after is not None:
            (db0, wal0), (db1, wal1) = result.file_before, result.file_after
            line += (
                f"; store.db {db0 / MIB:.1f} -> {db1 / MIB:.1f} MiB,"
                f" its WAL {wal0 / MIB:.1f} -> {wal1 / MIB:.1f} MiB (cut back to at most"
                f" 32 MiB at a checkpoint), while the live stream grew"
                f" {result.appended * LIVE_KIB / 1024:.1f} MiB"
            )
        print(line)
        print(f"            quiet     {percentiles(result.quiet)}")
        print(f"            sweeping  {percentiles(result.sweeping)}")
    print(f"  (load average after: {os.getloadavg()[0]:.2f})")


def percentiles(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        f"p50 {statistics.median(ordered):6.2f} ms  p99 {p99:6.2f} ms  max {ordered[-1]:6.2f} ms"
        f"  (min {ordered[0]:.2f} ms, n={len(ordered)})"
    )


def filesystem_of(path: Path) -> str:
    best, fstype = "", "?"
    for line in Path("/proc/mounts").read_text().splitlines():
        _, mount, kind, *_ = line.split()
        if str(path.resolve()).startswith(mount) and len(mount) > len(best):
            best, fstype = mount, kind
    return fstype


async def throughput(
    folder: Path, records: int, size: int, writers: int, rounds: int
) -> dict[str, Throughput]:
    """Every variant in turn, `rounds` times over, so a disk whose speed drifts (a shared
    machine) drifts under all of them alike; the totals are compared."""
    per_round = records // rounds // writers * writers
    baseline = Baseline(folder, size)
    one_store = await open_store(str(folder / "one"))
    many_store = await open_store(str(folder / "tasks"))
    variants = {
        "baseline": baseline.run,
        "one": StoreWriters(one_store, size, 1).run,
        "tasks": StoreWriters(many_store, size, writers).run,
    }
    seconds = dict.fromkeys([*variants, "procs"], 0.0)
    try:
        for store in (one_store, many_store):
            await store.append("bench/warm-up", [AppendRecord(b"")])
        for round_ in range(rounds):
            row = {}
            for name, run in variants.items():
                result = run(per_round)
                row[name] = await result if asyncio.iscoroutine(result) else result
            row["procs"] = await asyncio.to_thread(
                writer_processes, str(folder / "procs"), per_round, size, writers
            )
            for name, elapsed in row.items():
                seconds[name] += elapsed
            ratios = "  ".join(
                f"{name} {row['baseline'] / row[name]:4.2f}x" for name in ("one", "tasks", "procs")
            )
            print(
                f"  round {round_ + 1}/{rounds}: baseline {per_round / row['baseline']:6.0f}/s"
                f"  {ratios}",
                flush=True,
            )
    finally:
        baseline.close()
        await one_store.close()
        await many_store.close()
    return {name: Throughput(per_round * rounds, size, s) for name, s in seconds.items()}


def throughput_section(folder: Path, args: argparse.Namespace, size: int) -> None:
    print(
        f"append throughput: {args.records} records of {args.record_kib} KiB per variant,"
        f" across {STREAMS} streams, in {args.rounds} interleaved rounds"
    )
    results = asyncio.run(throughput(folder, args.records, size, args.writers, args.rounds))
    baseline = results["baseline"]
    print(baseline.line("baseline: O_APPEND file + fdatasync per record"))
    print(results["one"].line("store, 1 writer (sequential awaited appends)", baseline))
    print(results["tasks"].line(f"store, {args.writers} writer tasks, one store", baseline))
    print(results["procs"].line(f"store, {args.writers} writer processes (information)", baseline))

    one_x = results["one"].per_s / baseline.per_s
    many_x = results["tasks"].per_s / baseline.per_s
    print("targets:")
    print(f"  1 writer  >= 1.0x baseline: {one_x:5.2f}x  {'met' if one_x >= 1 else 'MISSED'}")
    print(
        f"  {args.writers} writers >= 3.0x baseline: {many_x:5.2f}x"
        f"  {'met' if many_x >= 3 else 'MISSED'}"
    )


def follow_section(folder: Path, args: argparse.Namespace, size: int) -> None:
    print(f"cross-process follow latency, {args.follow} appends of {args.record_kib} KiB:")
    from_call, from_ack = asyncio.run(follow_latency(str(folder / "follow"), args.follow, size))
    print(f"  append acknowledged in A -> B wakes   {percentiles(from_ack)}")
    print(f"  append called in A -> B wakes         {percentiles(from_call)}")
    print("  (below zero: B read the record before A's event loop resumed with the ack)")

    p99 = sorted(from_ack)[min(len(from_ack) - 1, int(len(from_ack) * 0.99))]
    print(f"  target: follow p99 <= 10 ms: {p99:5.2f} ms  {'met' if p99 <= 10 else 'MISSED'}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", help="folder to benchmark in (default: the system temp folder)")
    parser.add_argument("--records", type=int, default=2000, help="records per variant")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds")
    parser.add_argument("--record-kib", type=int, default=32)
    parser.add_argument("--follow", type=int, default=1000, help="appends for follow latency")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument(
        "--sections", default="throughput,follow,sweep", help="which parts to run, in order"
    )
    parser.add_argument("--sweep-backends", default="embedded,nats")
    parser.add_argument("--sweep-casts", type=int, default=1000)
    args = parser.parse_args(argv)
    sections = args.sections.split(",")
    size = args.record_kib * 1024
    folder = Path(tempfile.mkdtemp(prefix="speechd-bench-", dir=args.dir))
    try:
        fstype = filesystem_of(folder)
        # The filesystem, never the folder's path: printed figures are committed under results/.
        print(
            f"speechd store benchmark on {fstype}, Python {sys.version.split()[0]},"
            f" SQLite {sqlite3.sqlite_version}, {os.cpu_count()} CPUs"
        )
        if fstype in ("tmpfs", "ramfs"):
            print("  warning: a RAM filesystem: fsync costs nothing here; use --dir on a disk")
        print(f"load average before: {os.getloadavg()[0]:.2f}")
        if "throughput" in sections:
            throughput_section(folder, args, size)
        if "follow" in sections:
            follow_section(folder, args, size)
        if "sweep" in sections:
            sweep_section(folder, args.sweep_backends.split(","), args.sweep_casts)
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
