"""The worker process body: open the store, load the engine, announce ready, work until stopped.

While the model loads and warms up, the process says `loading` in `workers/<id>` every
heartbeat period; if it cannot load (or warm up) the model it says `unavailable` with the
error before it exits, so an api anywhere can tell callers why no worker is ready. A process
that starts after a failed one carries the failure in its `loading` notices: the previous
`unavailable` error, or, when the previous process died while loading (killed, say), that.
Once loaded, it checks which languages of its voices it can speak (`Parts.languages`), keeps
its voices in `config/voices` and hands over to `Worker.run`, which announces `ready`.

Exit codes: 0 stopped cleanly (SIGTERM, SIGINT or `stop`), 1 failed (an unexpected error; the
supervisor restarts it), 3 the model could not be loaded, or the device it was loaded on (named
by `--device`) stayed out of memory for a chunk: the worker then says `unavailable` with the
reason, names no cast (it is not the cast's fault: the next life makes that chunk again), and
the supervisor starts another after its backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec

from speechd.casts import last_notice, remember_voices
from speechd.casts.schema import (
    LOADING,
    READY,
    STOPPED,
    UNAVAILABLE,
    WorkerNotice,
    encode,
    worker_stream,
)
from speechd.durable import AppendRecord, DurableError, Store, open_store
from speechd.errors import ModelUnavailable
from speechd.telemetry import Telemetry, start_telemetry

from ._config import WorkerConfig
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

_MAX_ERROR_CHARS = 1000  # of a load error in a notice (a traceback-long message is cut)
_MAX_NOTICES_BEFORE_READY = 1000  # a stream that grew this long in failed starts starts over


def _load_engine(config: EngineConfig) -> EngineLike:
    from speechd.engine import load_engine

    return load_engine(config)


def _chunk_policy() -> ChunkPolicyLike:
    from speechd.text import ChunkPolicy

    return ChunkPolicy()


def _encoder(fmt: str, sample_rate: int, *, resume: bytes | None = None) -> EncoderLike:
    from speechd.audio import new_encoder

    return new_encoder(fmt, sample_rate, resume=resume)


def _missing_languages(voices: Sequence[str]) -> Mapping[str, str]:
    from speechd.text import missing_languages

    return missing_languages(voices)


@dataclass(frozen=True)
class Parts:
    """What a worker process builds on: how to load the engine, the engine's chunk policy,
    the encoders, and which languages of the engine's voices cannot be spoken here (language
    code -> why). The defaults are speechd's own, imported only when used (so importing
    speechd.worker stays torch-free); tests pass a cost-model engine. Picklable when its
    callables are module-level, as `Supervisor` needs."""

    load_engine: Callable[[EngineConfig], EngineLike] = _load_engine
    chunk_policy: Callable[[], ChunkPolicyLike] = _chunk_policy
    encoders: EncoderFactory = _encoder
    languages: Callable[[Sequence[str]], Mapping[str, str]] = _missing_languages


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class _Loading:
    """What the process says in `workers/<id>` before `Worker.run` announces it ready. Every
    such notice repeats the chunk in flight (`cast`, `chunk`, and the rest of its batch:
    `batch`) of the last life that rendered one, so whoever reads this worker's last words
    after a crash still finds them. Best effort: a store that cannot take a notice now is
    logged, and the load goes on."""

    def __init__(self, store: Store, worker_id: str, heartbeat_s: float) -> None:
        self._store = store
        self._id = worker_id
        self._heartbeat_s = heartbeat_s
        self.error = ""
        self._cast = ""
        self._chunk = -1
        self._batch: list[tuple[str, int]] = []

    async def begin(self, last_exit: str) -> None:
        """Read what the previous process of this id said last, then say `loading`."""
        try:
            found = await last_notice(self._store, self._id)
            previous = found[1] if found else None
            if previous is not None:  # its last words (none after a clean stop)
                self._cast, self._chunk = previous.cast, previous.chunk
                self._batch = list(previous.batch)
            if previous is not None and previous.kind == UNAVAILABLE:
                self.error = previous.error
            elif previous is not None and previous.kind == LOADING:
                how = f" ({last_exit})" if last_exit else ""
                died = f"the worker process before this one ended while loading the model{how}"
                self.error = died if last_exit or not previous.error else previous.error
            stream = worker_stream(self._id)
            if await self._store.check_tail(stream) >= _MAX_NOTICES_BEFORE_READY:
                await self._store.delete(stream)
        except DurableError as exc:
            log.warning("worker %s: cannot read its notices: %s", self._id, exc)
        await self.say(LOADING)

    async def beat(self) -> None:
        while True:
            await asyncio.sleep(self._heartbeat_s)
            await self.say(LOADING)

    async def say(self, kind: str, error: str | None = None) -> None:
        if error is not None:
            self.error = error[:_MAX_ERROR_CHARS]
        notice = WorkerNotice(
            kind=kind,
            worker=self._id,
            time_ms=_now_ms(),
            pid=os.getpid(),
            heartbeat_ms=round(self._heartbeat_s * 1000),
            cast=self._cast,
            chunk=self._chunk,
            batch=self._batch,
            error=self.error if kind in (LOADING, UNAVAILABLE) else "",
        )
        try:
            await self._store.append(worker_stream(self._id), [AppendRecord(encode(notice))])
        except DurableError as exc:
            log.warning("worker %s: cannot say %s: %s", self._id, kind, exc)


def run_worker(
    config: WorkerConfig,
    *,
    stop: threading.Event | None = None,
    parts: Parts | None = None,
    last_exit: str = "",
) -> int:
    """Run a worker until SIGTERM/SIGINT (when called on the main thread) or `stop`; return
    its exit code. `last_exit`: how the previous process of this worker id ended, when a
    supervisor knows (`describe_exit`), so a death while loading is reported as such."""
    return asyncio.run(_main(config, stop, parts or Parts(), last_exit))


async def _main(
    config: WorkerConfig, stop: threading.Event | None, parts: Parts, last_exit: str
) -> int:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    _on_signals(loop, stopping)
    if stop is not None:
        threading.Thread(
            target=_relay, args=(stop, loop, stopping), name="speechd-worker-stop", daemon=True
        ).start()
    worker_id = config.resolved_id()
    config = msgspec.structs.replace(config, worker_id=worker_id)  # the Worker's, too
    if not config.store:
        log.error("worker %s: no store given", worker_id)
        return EXIT_FAILED
    try:
        store = await open_store(config.store)
    except DurableError as exc:
        log.error("worker %s: cannot open the store: %s", worker_id, exc)
        return EXIT_FAILED
    said = _Loading(store, worker_id, config.heartbeat_s)
    telemetry: list[Telemetry] = []  # the one `_load` starts, closed here whatever happens
    try:
        await said.begin(last_exit)
        beating = asyncio.create_task(said.beat(), name="speechd-worker-loading")
        try:
            loaded = await _load(store, config, parts, worker_id, stopping, said, telemetry)
        finally:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating
        if isinstance(loaded, int):
            return loaded
        worker, notice = loaded
        await _remember(store, notice)
        try:
            await worker.run(stopping)
        except ModelUnavailable as exc:  # its device stayed full (a device was named)
            log.error("worker %s: the model is unavailable: %s", worker_id, exc)
            await _Loading(store, worker_id, config.heartbeat_s).say(UNAVAILABLE, str(exc))
            return EXIT_MODEL_UNAVAILABLE
        return EXIT_OK
    except Exception:
        log.exception("worker %s failed", worker_id)
        return EXIT_FAILED
    finally:
        for sampler in telemetry:
            await asyncio.to_thread(sampler.close)
        await store.close()


async def _load(
    store: Store,
    config: WorkerConfig,
    parts: Parts,
    worker_id: str,
    stopping: asyncio.Event,
    said: _Loading,
    telemetry: list[Telemetry],
) -> tuple[Worker, WorkerNotice] | int:
    """The worker with its engine loaded and warmed up, and what its `ready` notice will say;
    or the exit code if that failed (or the process was stopped meanwhile). The telemetry it
    starts is added to `telemetry`, for the caller to close."""
    loader = EngineThread("speechd-load")
    loading = asyncio.wrap_future(loader.submit(parts.load_engine, config.engine))
    loader.close()  # after the load it was given
    waiting = asyncio.ensure_future(stopping.wait())
    await asyncio.wait({loading, waiting}, return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    if not loading.done():  # stopped while the model loads: leave the loader behind
        loading.add_done_callback(lambda f: f.cancelled() or f.exception())
        await said.say(STOPPED)
        return EXIT_OK
    try:
        engine = loading.result()
    except ModelUnavailable as exc:
        log.error("worker %s: the model is unavailable: %s", worker_id, exc)
        await said.say(UNAVAILABLE, str(exc))
        return EXIT_MODEL_UNAVAILABLE
    except Exception as exc:
        log.exception("worker %s: loading the model failed", worker_id)
        await said.say(UNAVAILABLE, f"loading the model failed: {exc!r}")
        return EXIT_FAILED
    voices = list(engine.voices.installed)
    try:
        unspeakable = dict(await asyncio.to_thread(parts.languages, voices))
    except Exception:  # a broken probe must not keep the voices it did not judge from work
        log.exception("worker %s: cannot tell which languages it speaks", worker_id)
        unspeakable = {}
    for reason in unspeakable.values():
        log.warning("worker %s: %s", worker_id, reason)
    # NVML's init and tegrastats' start block: not on the loop.
    sampler = await asyncio.to_thread(start_telemetry, engine.device)
    telemetry.append(sampler)
    worker = Worker(
        store,
        engine,
        config,
        chunk_policy=_within_memory(parts.chunk_policy(), engine),
        encoders=parts.encoders,
        telemetry=sampler,
    )
    worker.unspeakable = unspeakable
    try:
        await worker.warm_up(config.engine.default_voice)
    except ModelUnavailable as exc:  # its device stayed full even for the warm-up's chunks
        log.error("worker %s: the model is unavailable: %s", worker_id, exc)
        await said.say(UNAVAILABLE, str(exc))
        return EXIT_MODEL_UNAVAILABLE
    except Exception as exc:
        log.exception("worker %s: the warm-up failed", worker_id)
        await said.say(UNAVAILABLE, f"the model failed its warm-up: {exc!r}")
        return EXIT_FAILED
    notice = WorkerNotice(
        kind=READY,
        worker=worker_id,
        time_ms=_now_ms(),
        voices=voices,
        device=engine.device,
        pid=os.getpid(),
        heartbeat_ms=round(config.heartbeat_s * 1000),
        unspeakable=unspeakable,
        device_name=sampler.device_name,
        telemetry=sampler.reading(),
    )
    return worker, notice


def _within_memory(policy: ChunkPolicyLike, engine: EngineLike) -> ChunkPolicyLike:
    """`policy` with chunks held to what the engine's device memory budget leaves room for
    (`--max-device-memory`); every policy the worker times from it keeps that cap."""
    chunk_s = getattr(getattr(engine, "memory", None), "chunk_s", 0.0)
    with_memory = getattr(policy, "with_memory", None)
    if chunk_s and callable(with_memory):
        return with_memory(chunk_s)  # type: ignore[no-any-return]
    return policy


async def _remember(store: Store, notice: WorkerNotice) -> None:
    """Keep the worker's voices in `config/voices` (best effort: it serves the voice list)."""
    try:
        await remember_voices(store, notice)
    except DurableError as exc:
        log.warning("worker %s: cannot keep its voices: %s", notice.worker, exc)


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
