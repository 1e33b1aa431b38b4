"""A server that the fuzz suites drive from synchronous hypothesis tests: its own event loop
on a thread, over an embedded store in a folder, up until `stop()`."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import TypeVar

from speechd.durable import EmbeddedStore, Store

__all__ = ["ThreadedServer"]

_S = TypeVar("_S", bound="ThreadedServer")


class ThreadedServer:
    """A subclass's `_serve(store)` brings its server up, sets `url`, then awaits
    `self._serving()`, which returns once `stop()` is called; the store is closed after."""

    name = "threaded-server"

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.url = ""
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)

    async def _serve(self, store: Store) -> None:
        raise NotImplementedError

    async def _serving(self) -> None:
        assert self._stop is not None
        self._ready.set()
        await self._stop.wait()

    def _main(self) -> None:
        try:
            asyncio.run(self._body())
        except BaseException as exc:  # reported by start()/stop()
            self._error = exc
        finally:
            self._ready.set()

    async def _body(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        store = await EmbeddedStore.open(self.folder)
        try:
            await self._serve(store)
        finally:
            await store.close()

    def start(self: _S) -> _S:
        self._thread.start()
        self._ready.wait(60)
        if self._error is not None or not self.url:
            raise RuntimeError(f"the {self.name} did not start") from self._error
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(60)
        if self._error is not None:
            raise RuntimeError(f"the {self.name} failed") from self._error
