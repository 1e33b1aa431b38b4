"""The engine thread: every engine call runs on one daemon thread, one at a time.

One model, one call in flight; the worker's event loop stays free to heartbeat, long-poll jobs
and react to SIGTERM while a chunk renders. The thread is a daemon so that a worker stopping
mid-chunk can abandon the call and exit without waiting for it.

It should be the only thread of its process that runs torch (the model loads on a thread that
has ended by then). Each thread that runs torch keeps an OpenMP team of its own while it lives,
and libgomp cuts its threads' spin-waiting to almost nothing once a process holds more OpenMP
threads than CPUs: with a second team alive, synthesis on 2 cores took 13% longer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["EngineThread"]

T = TypeVar("T")

_Item = tuple[concurrent.futures.Future[Any], Callable[..., Any], tuple[Any, ...]]


class EngineThread:
    def __init__(self, name: str = "speechd-engine") -> None:
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._last: concurrent.futures.Future[Any] | None = None

    def submit(self, fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._queue.put((future, fn, args))
        self._last = future
        return future

    async def idle(self) -> None:
        """Wait until the calls submitted so far have ended (however they ended)."""
        last = self._last
        if last is not None and not last.done():
            await asyncio.wait([asyncio.wrap_future(last)])

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.wrap_future(self.submit(fn, *args))

    def close(self) -> None:
        """Let the thread end after the call it is running (if any); never waits for it."""
        self._queue.put(None)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, fn, args = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args)
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(result)
