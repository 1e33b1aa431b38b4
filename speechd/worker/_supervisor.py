"""Supervision: the worker runs in a child process and is restarted with backoff when it dies.

The child is started with multiprocessing's `spawn` (never `fork` once torch threads or CUDA
exist). It ignores SIGINT (a Ctrl-C reaches the whole process group; the supervisor decides),
stops gracefully on SIGTERM, and stops by itself if its parent dies. Every restart reuses the
same worker id, so the new process takes over the casts of the dead one at once, and is told
how the dead one ended: if it died while loading the model (an OOM kill, say), the new one's
`loading` notices say so, and callers waiting on the model hear why it is not ready.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
import threading
import time

import msgspec

from speechd.logs import configure_logging, mask_handlers

from ._config import WorkerConfig
from ._process import Parts, run_worker

__all__ = ["Supervisor"]

log = logging.getLogger("speechd.worker")


def _child(config: WorkerConfig, parts: Parts | None, log_level: int, last_exit: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not logging.getLogger().handlers:  # every line masked: no cast id (speechd.logs)
        configure_logging(log_level, "%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s")
    mask_handlers()
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(
            target=_stop_with, args=(parent,), name="speechd-orphan", daemon=True
        ).start()
    sys.exit(run_worker(config, parts=parts, last_exit=last_exit))


def _stop_with(parent: multiprocessing.process.BaseProcess) -> None:
    parent.join()
    os.kill(os.getpid(), signal.SIGTERM)


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class Supervisor:
    """Keeps one worker process running until `stop`.

    A worker that dies (OOM, SIGKILL, segfault, an error) is started again after a backoff that
    doubles from `backoff_s` up to `max_backoff_s`, and falls back to `backoff_s` once a worker
    has lived `stable_s`. `restarts` counts the restarts; `exit_codes` lists how each died.
    """

    def __init__(
        self,
        config: WorkerConfig,
        *,
        parts: Parts | None = None,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        stable_s: float = 60.0,
    ) -> None:
        self.config = msgspec.structs.replace(config, worker_id=config.resolved_id())
        self.restarts = 0
        self.exit_codes: list[int | None] = []
        self._parts = parts
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        self._stable_s = stable_s
        self._context = multiprocessing.get_context("spawn")
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._process: multiprocessing.process.BaseProcess | None = None
        self._watcher: threading.Thread | None = None

    @property
    def worker_id(self) -> str:
        assert self.config.worker_id is not None
        return self.config.worker_id

    @property
    def alive(self) -> bool:
        process = self._process
        return process is not None and process.is_alive()

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None else None

    def start(self) -> None:
        """Start the worker process and watch over it (returns at once)."""
        if self._watcher is not None:
            raise RuntimeError("this supervisor was started already")
        self._watcher = threading.Thread(target=self._watch, name="speechd-supervisor", daemon=True)
        self._spawn()
        self._watcher.start()

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM the worker, wait up to `timeout`, then SIGKILL it; its exit code."""
        with self._lock:
            self._stopping.set()
            process = self._process
        if process is not None and process.is_alive():
            process.terminate()
            process.join(timeout)
            if process.is_alive():
                log.warning("worker %s did not stop in %.0f s; killing it", self.worker_id, timeout)
                process.kill()
                process.join()
        if self._watcher is not None:
            self._watcher.join()
        return process.exitcode if process is not None else None

    def _spawn(self) -> bool:
        with self._lock:
            if self._stopping.is_set():
                return False
            last_exit = describe_exit(self.exit_codes[-1]) if self.exit_codes else ""
            level = logging.getLogger().getEffectiveLevel()
            process = self._context.Process(
                target=_child,
                args=(self.config, self._parts, level, last_exit),
                name=f"speechd-worker-{self.worker_id}",
                daemon=True,
            )
            process.start()
            self._process = process
            return True

    def _watch(self) -> None:
        backoff = self._backoff_s
        while True:
            process = self._process
            assert process is not None
            started = time.monotonic()
            process.join()
            if self._stopping.is_set():
                return
            self.exit_codes.append(process.exitcode)
            if time.monotonic() - started >= self._stable_s:
                backoff = self._backoff_s
            log.warning(
                "worker %s %s; restarting in %.1f s",
                self.worker_id,
                describe_exit(process.exitcode),
                backoff,
            )
            if self._stopping.wait(backoff) or not self._spawn():
                return
            self.restarts += 1
            backoff = min(backoff * 2, self._max_backoff_s)
