"""Soak the store: thousands of short casts under retention and trim, and what stays bounded.

    python -m loadtest.bench_soak [--casts 5000] [--rate 40] [--retention 60] [--receipts 500]
                                  [--backends embedded,nats] [--linger S] [--dir DIR]

Per backend (the embedded store, and a stock `nats-server -js` with no speechd settings), in
one folder on one disk, three processes share one store as a deployment's would:

* a worker (`speechd.worker.Worker`, as `speechd worker` runs it) with a cost-model engine in
  place of the GPU (the worker tests' `CostEngine`; a chunk takes 1 ms + 0.2% of its audio,
  slept), trimming `jobs` below its cursor and `progress/done` to `--receipts`;
* the api's retention sweep (`sweep_forever`'s loop, `--retention` seconds, over the
  prefixes `speechd serve` sweeps), which notes when each sweep ran and what it removed;
* this process: it submits `--casts` short casts at `--rate` per second and listens to one
  in ten from its first record, noting when each audio record reaches it.

Printed: the data folder (embedded: the SQLite file and its WAL; NATS: the server's
JetStream folder) and the first and tail seqs of `jobs` over time, at most 25 lines; then,
per audio record listened to, the *chunk delay*: from the moment the worker handed the
record to the store to the moment the listener had it (append, commit and wake-up), split
into records whose delay overlapped a sweep that removed something and the others (p50, p99,
max, and the ratio of the p99s); the sweeps themselves; and the load average before and
after. After the last cast ends, it lingers (`--linger`, by default the retention plus two
sweep intervals) so every cast expires and the folder's end size shows what is left.

It is a measurement, not a test: it prints figures and exits 0. Nothing is asserted on speed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from harness.engines import CostEngine, FakeChunkPolicy, FakeEncoder
from harness.forwarding import ForwardingStore
from harness.nats import NatsServer, namespace_for
from speechd.casts import cast_id, deployment_secret, ready_workers, submit
from speechd.casts.schema import (
    CAST_PREFIX,
    CATALOG_PREFIX,
    H_EVENT,
    JOBS,
    JOBS_CURSOR,
    LEASES_PREFIX,
    PROGRESS_DONE,
    WORKERS_PREFIX,
    Cursor,
    Event,
    Recipe,
    cast_stream,
    decode,
    event_of,
)
from speechd.durable import (
    AppendAck,
    AppendRecord,
    Retention,
    SeqOutOfRange,
    Store,
    open_store,
)
from speechd.worker import Worker, WorkerConfig

SPAWN = multiprocessing.get_context("spawn")
ENGINE = {"rtf": 0.002, "overhead_s": 0.001}
PREFIXES = (CAST_PREFIX, CATALOG_PREFIX, LEASES_PREFIX)  # what `speechd serve` sweeps
LISTEN_EVERY = 10
MAX_LINES = 25
MIB = 1024 * 1024


class Handed(ForwardingStore):
    """The worker's store, noting when each audio record was handed to it (wall clock)."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.handed: dict[str, float] = {}  # "stream seq" -> time.time()
        self.errors = 0  # casts ended in error (e.g. swept while they waited)

    async def append(
        self, stream: str, records: Sequence[AppendRecord], *, match_seq_num: int | None = None
    ) -> AppendAck:
        at = time.time()
        ack = await self.inner.append(stream, records, match_seq_num=match_seq_num)
        for n, record in enumerate(records):
            event = dict(record.headers).get(H_EVENT)
            if event == b"audio":
                self.handed[f"{stream} {ack.start_seq + n}"] = at
            elif event == b"error":
                self.errors += 1
        return ack


def _until(stop: Any) -> asyncio.Event:
    """An asyncio event set when the multiprocessing event `stop` is."""
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    threading.Thread(
        target=lambda: (stop.wait(), loop.call_soon_threadsafe(stopping.set)), daemon=True
    ).start()
    return stopping


def _worker_process(url: str, receipts: int, stop: Any, results: Any) -> None:
    async def main() -> None:
        store = Handed(await open_store(url))
        worker = Worker(
            store,
            CostEngine(**ENGINE),
            WorkerConfig(worker_id="soak", policy="deadline", heartbeat_s=1.0, receipts=receipts),
            chunk_policy=FakeChunkPolicy(),
            encoders=FakeEncoder,
        )
        try:
            await worker.run(_until(stop))
        finally:
            results.put(msgspec.msgpack.encode((store.handed, store.errors)))
            await store.close()

    asyncio.run(main())


def _sweeper_process(url: str, retention_s: float, stop: Any, results: Any) -> None:
    """The api's retention loop (`sweep_forever`), noting each sweep's (start, end, removed)."""

    async def main() -> None:
        store = await open_store(url)
        stopping = _until(stop)
        interval = Retention(retention_s, PREFIXES).interval_s
        sweeps: list[tuple[float, float, int]] = []
        try:
            while not stopping.is_set():
                began = time.time()
                removed = await store.sweep(retention_s, PREFIXES)
                sweeps.append((began, time.time(), removed))
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stopping.wait(), interval)
        finally:
            results.put(msgspec.msgpack.encode(sweeps))
            await store.close()

    asyncio.run(main())


def _folder_bytes(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(FileNotFoundError):  # gone since the listing
                total += os.stat(os.path.join(root, name)).st_size
    return total


async def _bounds(store: Store, stream: str) -> tuple[int, int]:
    """(first, tail) of `stream`."""
    try:
        batch = await store.read(stream, 0, max_records=1)
    except SeqOutOfRange as exc:
        return exc.first, exc.tail
    return 0, batch.tail


async def _committed(store: Store) -> int:
    tail = await store.check_tail(JOBS_CURSOR)
    if tail == 0:
        return 0
    try:
        batch = await store.read(JOBS_CURSOR, tail - 1, max_records=1)
    except SeqOutOfRange:
        return 0
    return decode(batch.records[0].body, Cursor).offset if batch.records else 0


async def _listen(store: Store, cid: str, heard: dict[str, float]) -> None:
    """Follow the cast from its first record to its end; note when each audio record came."""
    stream, seq = cast_stream(cid), 0
    while True:
        try:
            batch = await store.read(stream, seq, wait=10.0)
        except SeqOutOfRange:  # swept: nothing more to hear
            return
        now = time.time()
        for record in batch.records:
            event = event_of(record)
            if event == Event.AUDIO:
                heard[f"{stream} {record.seq_num}"] = now
            elif event in (Event.EOS, Event.ERROR):
                return
        if batch.records:
            seq = batch.records[-1].seq_num + 1


class Sample(msgspec.Struct):
    at: float
    submitted: int
    done: int
    folder: int
    jobs: tuple[int, int]
    cursor_records: int
    receipts: int


async def _soak(backend: str, url: str, folder: Path, args: argparse.Namespace) -> Soaked:
    stop = SPAWN.Event()
    results = SPAWN.Queue()
    sweeps_out = SPAWN.Queue()
    worker = SPAWN.Process(target=_worker_process, args=(url, args.receipts, stop, results))
    sweeper = SPAWN.Process(target=_sweeper_process, args=(url, args.retention, stop, sweeps_out))
    worker.start()
    sweeper.start()
    samples: list[Sample] = []
    heard: dict[str, float] = {}
    submitted = 0
    try:
        async with await open_store(url) as store:
            deadline = time.monotonic() + 120
            while not await ready_workers(store, now_ms=int(time.time() * 1000)):
                if time.monotonic() > deadline:
                    raise TimeoutError("the worker never got ready")
                await asyncio.sleep(0.1)
            secret = await deployment_secret(store)
            began = time.monotonic()
            interval = max(5.0, (args.casts / args.rate + args.linger + 30) / MAX_LINES)
            listeners: set[asyncio.Task[None]] = set()

            async def sample() -> None:
                jobs = await _bounds(store, JOBS)
                cursor = await _bounds(store, JOBS_CURSOR)
                receipts = await _bounds(store, PROGRESS_DONE)
                samples.append(
                    Sample(
                        time.monotonic() - began,
                        submitted,
                        await _committed(store),
                        _folder_bytes(folder),
                        jobs,
                        cursor[1] - cursor[0],
                        receipts[1] - receipts[0],
                    )
                )

            async def sampler() -> None:
                while True:
                    await sample()
                    await asyncio.sleep(interval)

            sampling = asyncio.create_task(sampler())
            now_ms = int(time.time() * 1000)
            tick = 0.05
            for n in range(args.casts):
                # Steady pace: cast n goes out at n / rate seconds.
                late = began + n / args.rate - time.monotonic()
                if late > 0:
                    await asyncio.sleep(max(late, tick))
                text = f"soak {n} {backend} {now_ms} alpha bravo charlie"
                cid = cast_id(
                    secret, model="kokoro", voice="af_heart", speed=1.0, format="pcm", text=text
                )
                recipe = Recipe(text, "kokoro", "af_heart", 1.0, "pcm", text[:20], now_ms)
                await submit(store, cid, recipe, sample_rate=24_000)
                submitted += 1
                if n % LISTEN_EVERY == 0:
                    task = asyncio.create_task(_listen(store, cid, heard))
                    listeners.add(task)
                    task.add_done_callback(listeners.discard)
            deadline = time.monotonic() + max(600.0, args.casts / 5)
            while await _committed(store) < args.casts:
                if time.monotonic() > deadline:
                    raise TimeoutError("the worker did not finish the casts")
                await asyncio.sleep(0.5)
            drained = time.monotonic() - began
            print(f"    all {args.casts} ended {drained:.0f} s in; lingering {args.linger:.0f} s")
            await asyncio.sleep(args.linger)
            sampling.cancel()
            await sample()
            for task in list(listeners):
                task.cancel()
            await store.sweep(0, [WORKERS_PREFIX])
        stop.set()
        handed, errors = msgspec.msgpack.decode(
            await asyncio.to_thread(results.get, True, 60), type=tuple[dict[str, float], int]
        )
        sweeps = msgspec.msgpack.decode(
            await asyncio.to_thread(sweeps_out.get, True, 60),
            type=list[tuple[float, float, int]],
        )
    finally:
        stop.set()
        for proc in (worker, sweeper):
            proc.join(30)
            if proc.is_alive():
                proc.kill()
    return Soaked(samples, handed, heard, sweeps, errors, _files(folder))


class Soaked(msgspec.Struct):
    samples: list[Sample]
    handed: dict[str, float]
    heard: dict[str, float]
    sweeps: list[tuple[float, float, int]]
    errors: int
    files: dict[str, int]  # the largest files at the end, by name


def _files(folder: Path) -> dict[str, int]:
    sizes = {}
    for path in folder.rglob("*"):
        with contextlib.suppress(FileNotFoundError):
            if path.is_file():
                sizes[str(path.relative_to(folder))] = path.stat().st_size
    return dict(sorted(sizes.items(), key=lambda kv: -kv[1])[:4])


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _line(label: str, values: list[float]) -> str:
    if not values:
        return f"    {label:<22} n=0"
    return (
        f"    {label:<22} n={len(values):<6} p50 {_pct(values, 0.5):7.2f} ms"
        f"  p99 {_pct(values, 0.99):7.2f} ms  max {max(values):7.2f} ms"
    )


def report(soaked: Soaked) -> None:
    samples, handed, heard, sweeps = soaked.samples, soaked.handed, soaked.heard, soaked.sweeps
    print("     t s  submitted   done  folder MiB  jobs first..tail  cursor recs  receipts")
    for s in samples:
        print(
            f"  {s.at:6.0f}  {s.submitted:9d}  {s.done:5d}  {s.folder / MIB:10.2f}"
            f"  {s.jobs[0]:>7d}..{s.jobs[1]:<7d}  {s.cursor_records:11d}  {s.receipts:8d}"
        )
    peak = max(s.folder for s in samples)
    print(f"    folder: peak {peak / MIB:.2f} MiB, end {samples[-1].folder / MIB:.2f} MiB")
    largest = ", ".join(f"{name} {size / MIB:.2f} MiB" for name, size in soaked.files.items())
    print(f"    largest files at the end: {largest}")
    if soaked.errors:
        print(f"    casts that ended in error: {soaked.errors} (swept while waiting, if any)")
    working = [(a, b) for a, b, removed in sweeps if removed]
    quiet: list[float] = []
    swept: list[float] = []
    for key, arrived in heard.items():
        sent = handed.get(key)
        if sent is None:  # made by nobody we timed (cannot happen with one worker)
            continue
        delay = (arrived - sent) * 1000
        overlaps = any(a <= arrived and sent <= b for a, b in working)
        (swept if overlaps else quiet).append(delay)
    print("    chunk delay (worker hands the record to the store -> the listener has it):")
    print(_line("outside sweeps", quiet))
    print(_line("during sweeps", swept))
    if quiet and swept:
        print(f"    p99 during / outside sweeps: {_pct(swept, 0.99) / _pct(quiet, 0.99):.2f}x")
    if swept:
        print(f"    worst chunk delay during a sweep: {max(swept):.1f} ms")
    removed = sum(r for _a, _b, r in sweeps)
    longest = max((b - a for a, b, r in sweeps if r), default=0.0)
    print(
        f"    sweeps: {len(sweeps)} ({len(working)} removed something), {removed} streams "
        f"removed, longest {longest:.2f} s"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--casts", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=25.0, help="casts submitted per second")
    parser.add_argument("--retention", type=float, default=60.0, help="seconds (1m)")
    parser.add_argument("--receipts", type=int, default=500, help="the worker's window")
    parser.add_argument("--linger", type=float, default=None, help="seconds after the last")
    parser.add_argument("--backends", default="embedded", help="embedded, nats, or both")
    parser.add_argument("--dir", default=None, help="where the stores live (default: a temp)")
    args = parser.parse_args(argv)
    if args.linger is None:
        args.linger = args.retention + 2 * Retention(args.retention, PREFIXES).interval_s
    root = Path(args.dir or tempfile.mkdtemp(prefix="speechd-soak-"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"soak: {args.casts} casts at {args.rate:g}/s, retention {args.retention:g} s, "
        f"receipts {args.receipts}, trim on; {os.cpu_count()} cores; in {root}"
    )
    try:
        for backend in args.backends.split(","):
            folder = root / backend
            folder.mkdir(parents=True, exist_ok=True)
            server: NatsServer | None = None
            if backend == "embedded":
                url, measured = str(folder / "data"), folder / "data"
            elif backend == "nats":
                if not _has_nats_binary():
                    print("  nats: no nats-server here; skipped")
                    continue
                server = NatsServer(folder, stock=True).start()
                url = f"{server.url}/?namespace={namespace_for('soak')}"
                measured = server.store_dir
            else:
                parser.error(f"unknown backend {backend!r}")
            print(f"\n  {backend}" + (" (stock nats-server -js)" if server else ""))
            try:
                soaked = asyncio.run(_soak(backend, url, measured, args))
            finally:
                if server is not None:
                    server.stop()
            report(soaked)
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def _has_nats_binary() -> bool:
    from harness.nats import nats_server_binary

    try:
        nats_server_binary()
    except Exception:
        return False
    return True


if __name__ == "__main__":
    main(sys.argv[1:])
