"""Worker processes on a shared store for the scale-out tests: `speechd.worker.run_worker`
with the cost-model engine of `harness.engines`, spawned (as `speechd worker` would
run), killable."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from harness.engines import FakeEncoder, parts
from speechd.casts import ready_workers
from speechd.casts.schema import Start, cast_stream, decode
from speechd.durable import Store
from speechd.engine import EngineConfig
from speechd.worker import WorkerConfig, run_worker
from speechd.worker._protocols import EncoderFactory
from tests.worker._helpers import check_layout, records

SPAWN = multiprocessing.get_context("spawn")


def _run(config: WorkerConfig, encoders: EncoderFactory, settings: dict[str, float]) -> None:
    run_worker(config, parts=parts(encoders=encoders, **settings))


@contextmanager
def worker_processes(
    url: str,
    ids: list[str],
    *,
    lease_s: float = 1.0,
    encoders: EncoderFactory = FakeEncoder,
    **engine: float,
) -> Iterator[dict[str, Any]]:
    """One spawned worker process per id (`encoders` module-level, to be picklable; `engine`:
    the cost model's settings); whatever is left is killed at the end."""
    procs = {}
    for worker_id in ids:
        config = WorkerConfig(
            store=url,
            engine=EngineConfig(),
            worker_id=worker_id,
            heartbeat_s=0.2,
            lease_s=lease_s,
        )
        proc = SPAWN.Process(target=_run, args=(config, encoders, engine), daemon=True)
        proc.start()
        procs[worker_id] = proc
    try:
        yield procs
    finally:
        for proc in procs.values():
            if proc.is_alive():
                proc.kill()
            proc.join(10)


async def wait_ready(store: Store, ids: list[str], within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        ready = {n.worker for n in await ready_workers(store, now_ms=int(time.time() * 1000))}
        if set(ids) <= ready:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"workers {ids} not ready in {within} s")


async def owners(store: Store, ids: list[str]) -> dict[str, str]:
    """Cast id -> the worker of its latest attempt (casts not started yet are left out)."""
    found = {}
    for cid in ids:
        attempts = check_layout(await records(store, cast_stream(cid)))
        if attempts:
            found[cid] = decode(attempts[-1][0].body, Start).worker
    return found
