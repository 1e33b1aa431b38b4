"""A real worker (engine test double) with a telemetry sampler, on its own thread."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from harness.engines import CostEngine, FakeChunkPolicy
from speechd.audio import new_encoder
from speechd.casts import ready_workers
from speechd.durable import open_store
from speechd.telemetry import Telemetry
from speechd.telemetry._readings import DeviceSample
from speechd.worker import Worker, WorkerConfig
from speechd.worker._batching import BatchCosts

__all__ = ["WORKER", "Board", "running_worker"]

WORKER = "telemetry-worker"


class Board:
    """A Jetson-like source: GPU load, shared memory, an input rail, temperatures."""

    name = "tegrastats"

    def sample(self) -> DeviceSample:
        return DeviceSample(
            gpu_percent=99.0,
            memory_used_bytes=5 << 30,
            memory_total_bytes=8 << 30,
            memory_kind="shared",
            power_w=9.911,
            power_rail="VDD_IN",
            rails_w={"VDD_IN": 9.911, "VDD_SOC": 2.163},
            temperatures_c={"gpu": 59.6, "tj": 59.6},
        )

    def close(self) -> None:
        pass


@contextlib.contextmanager
def running_worker(
    store_dir: Path,
    telemetry: Telemetry,
    engine: CostEngine | None = None,
    batch_costs: BatchCosts | None = None,
) -> Iterator[None]:
    """A `Worker` with `telemetry` on its own thread and loop (on `engine`, batching as
    `batch_costs` say: batch 1 by default); ready once this yields."""
    ready, stopping = threading.Event(), threading.Event()
    failed: list[BaseException] = []

    async def body() -> None:
        async with await open_store(str(store_dir)) as store:
            worker = Worker(
                store,
                engine or CostEngine(),
                WorkerConfig(worker_id=WORKER, heartbeat_s=0.2),
                chunk_policy=FakeChunkPolicy(),
                encoders=new_encoder,
                telemetry=telemetry,
                batch_costs=batch_costs,
            )
            stop = asyncio.Event()
            run = asyncio.create_task(worker.run(stop))
            for _ in range(3000):  # until it announced itself ready (or failed)
                if run.done() or await ready_workers(store, now_ms=_now_ms()):
                    break
                await asyncio.sleep(0.02)
            ready.set()
            await asyncio.to_thread(stopping.wait)
            stop.set()
            await run
            await worker.idle()

    def main() -> None:
        try:
            asyncio.run(body())
        except BaseException as exc:
            failed.append(exc)
        finally:
            ready.set()

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    ready.wait(60)
    try:
        yield
    finally:
        stopping.set()
        thread.join(30)
        telemetry.close()
        if failed:
            raise failed[0]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
