"""The worker process body: open the store, load the engine, announce ready, work until stopped.

Exit codes: 0 stopped cleanly (SIGTERM, SIGINT or `stop`), 1 failed (an unexpected error; the
supervisor restarts it), 3 the model could not be loaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from speechd.durable import DurableError, open_store
from speechd.errors import ModelUnavailable

from ._config import WorkerConfig
from ._policy import make_policy
from ._protocols import ChunkPolicyLike, EncoderFactory, EncoderLike, EngineLike
from ._thread import EngineThread
from ._worker import Worker

if TYPE_CHECKING:
    from speechd.engine import EngineConfig

__all__ = ["EXIT_FAILED", "EXIT_MODEL_UNAVAILABLE", "EXIT_OK", "Parts", "run_worker"]

log = logging.getLogger("speechd.worker")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_MODEL_UNAVAILABLE = 3


def _load_engine(config: EngineConfig) -> EngineLike:
    from speechd.engine import load_engine

    return load_engine(config)


def _chunk_policy() -> ChunkPolicyLike:
    from speechd.engine import ChunkPolicy

    return ChunkPolicy()


def _encoder(fmt: str, sample_rate: int, *, resume: bytes | None = None) -> EncoderLike:
    from speechd.audio import new_encoder

    return new_encoder(fmt, sample_rate, resume=resume)


@dataclass(frozen=True)
class Parts:
    """What a worker process builds on: how to load the engine, the engine's chunk policy and
    the encoders. The defaults are speechd's own, imported only when used (so importing
    speechd.worker stays torch-free); tests pass a cost-model engine. Picklable when its
    callables are module-level, as `Supervisor` needs."""

    load_engine: Callable[[EngineConfig], EngineLike] = _load_engine
    chunk_policy: Callable[[], ChunkPolicyLike] = _chunk_policy
    encoders: EncoderFactory = _encoder


def run_worker(
    config: WorkerConfig, *, stop: threading.Event | None = None, parts: Parts | None = None
) -> int:
    """Run a worker until SIGTERM/SIGINT (when called on the main thread) or `stop`; return
    its exit code."""
    return asyncio.run(_main(config, stop, parts or Parts()))


async def _main(config: WorkerConfig, stop: threading.Event | None, parts: Parts) -> int:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    _on_signals(loop, stopping)
    if stop is not None:
        threading.Thread(
            target=_relay, args=(stop, loop, stopping), name="speechd-worker-stop", daemon=True
        ).start()
    worker_id = config.resolved_id()
    try:
        store = await open_store(config.store)
    except DurableError as exc:
        log.error("worker %s: cannot open the store: %s", worker_id, exc)
        return EXIT_FAILED
    try:
        loader = EngineThread("speechd-load")
        loading = asyncio.wrap_future(loader.submit(parts.load_engine, config.engine))
        loader.close()  # after the load it was given
        waiting = asyncio.ensure_future(stopping.wait())
        await asyncio.wait({loading, waiting}, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if not loading.done():  # stopped while the model loads: leave the loader behind
            loading.add_done_callback(lambda f: f.cancelled() or f.exception())
            return EXIT_OK
        try:
            engine = loading.result()
        except ModelUnavailable as exc:
            log.error("worker %s: the model is unavailable: %s", worker_id, exc)
            return EXIT_MODEL_UNAVAILABLE
        worker = Worker(
            store,
            engine,
            worker_id=worker_id,
            chunk_policy=parts.chunk_policy(),
            encoders=parts.encoders,
            policy=make_policy(config.policy, comfortable_lead_s=config.comfortable_lead_s),
            retries=config.retries,
            max_active=config.max_active,
            quantum_s=config.quantum_s,
            heartbeat_s=config.heartbeat_s,
            lease_s=config.lease_s,
            stop_grace_s=config.stop_grace_s,
        )
        await worker.warm_up(config.engine.default_voice)
        await worker.run(stopping)
        return EXIT_OK
    except Exception:
        log.exception("worker %s failed", worker_id)
        return EXIT_FAILED
    finally:
        await store.close()


def _relay(stop: threading.Event, loop: asyncio.AbstractEventLoop, to: asyncio.Event) -> None:
    stop.wait()
    with contextlib.suppress(RuntimeError):  # the worker already ended and its loop closed
        loop.call_soon_threadsafe(to.set)


def _on_signals(loop: asyncio.AbstractEventLoop, stopping: asyncio.Event) -> None:
    signals = [signal.SIGTERM]
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signals.append(signal.SIGINT)
    for signum in signals:
        # Only the main thread can take signals; elsewhere `stop` is the way to end.
        with contextlib.suppress(ValueError, RuntimeError):
            loop.add_signal_handler(signum, stopping.set)
