"""The real worker (`speechd.worker`) for the api tests and the load tests, on the engine
test double with speechd's own encoders: only the engine is a stand-in.

`running_worker` runs `Worker` in this process, on a thread with its own event loop and store,
so it keeps working while a test blocks its own loop on the app (`AsyncTestClient` runs the
app on yet another loop). `worker_process` runs it as its own process, as `speechd worker`
does (`run_worker`), under the `Supervisor` that `speechd serve` uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec

from harness.engines import CostEngine, FakeChunkPolicy, expected_audio, parts
from speechd.audio import new_encoder
from speechd.casts import ready_workers
from speechd.durable import Store, open_store
from speechd.engine import EngineConfig
from speechd.worker import Supervisor, Worker, WorkerConfig

__all__ = ["WORKER_ID", "expected", "running_worker", "worker_process"]

WORKER_ID = "api-worker"
_READY_S = 60.0


def expected(cast_id: str, text: str, fmt: str = "mp3") -> bytes:
    """The file the worker makes for the cast `cast_id` of `text` (at speed 1, in `fmt`)."""
    return expected_audio(cast_id, text, fmt=fmt, encoders=new_encoder)


async def _wait_ready(store: Store, worker_id: str, alive: Callable[[], bool]) -> None:
    deadline = time.monotonic() + _READY_S
    while time.monotonic() < deadline and alive():
        ready = await ready_workers(store, now_ms=time.time_ns() // 1_000_000)
        if any(notice.worker == worker_id for notice in ready):
            return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"worker {worker_id} did not become ready")


@contextlib.contextmanager
def running_worker(store_dir: Path) -> Iterator[Worker]:
    """A `Worker` on its own thread; ready once this yields, stopped (and idle) after."""
    holder: dict[str, object] = {}
    ready = threading.Event()

    async def body() -> None:
        store = await open_store(str(store_dir))
        try:
            worker = Worker(
                store,
                CostEngine(),
                WorkerConfig(worker_id=WORKER_ID),
                chunk_policy=FakeChunkPolicy(),
                encoders=new_encoder,
            )
            stop = asyncio.Event()
            holder.update(worker=worker, stop=stop, loop=asyncio.get_running_loop())
            run = asyncio.create_task(worker.run(stop))
            await _wait_ready(store, WORKER_ID, lambda: not run.done())
            ready.set()
            await run
            await worker.idle()
        finally:
            await store.close()

    def main() -> None:
        try:
            asyncio.run(body())
        except BaseException as exc:
            holder["error"] = exc
        finally:
            ready.set()

    thread = threading.Thread(target=main, name="api-test-worker", daemon=True)
    thread.start()
    ready.wait()
    if "error" in holder:
        raise RuntimeError("the worker failed to start") from holder["error"]  # type: ignore[arg-type]
    try:
        yield holder["worker"]  # type: ignore[misc]
    finally:
        loop: asyncio.AbstractEventLoop = holder["loop"]  # type: ignore[assignment]
        loop.call_soon_threadsafe(holder["stop"].set)  # type: ignore[attr-defined]
        thread.join(30)
        if "error" in holder:
            raise RuntimeError("the worker failed") from holder["error"]  # type: ignore[arg-type]


@contextlib.contextmanager
def worker_process(
    store_dir: Path, *, lead_s: float | None = None, **engine: float
) -> Iterator[Supervisor]:
    """A supervised worker process on the store in `store_dir`, its engine the cost model
    with `engine`'s settings; ready once this yields, stopped (SIGTERM) after. `lead_s`: how
    far ahead of its listeners the worker gets before it sleeps (None: the default)."""
    config = WorkerConfig(store=str(store_dir), engine=EngineConfig(), worker_id=WORKER_ID)
    if lead_s is not None:
        config = msgspec.structs.replace(config, comfortable_lead_s=lead_s)
    supervisor = Supervisor(config, parts=parts(encoders=new_encoder, **engine))
    supervisor.start()
    try:

        async def wait() -> None:
            async with await open_store(str(store_dir)) as store:
                await _wait_ready(store, WORKER_ID, lambda: not supervisor.exit_codes)

        asyncio.run(wait())
        yield supervisor
    finally:
        supervisor.stop()
