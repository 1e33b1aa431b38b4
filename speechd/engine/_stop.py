"""Stopping a synthesis in flight from another thread: the worker's way to give the device to a
listener who arrives while a book's chunk is being made.

The worker hands `synthesize` a `Stop` for a chunk that may be cut short, and sets it from its
event loop; the engine thread's call then ends with `Preempted` at the runtime's next
checkpoint (torch: before any module runs; ONNX Runtime: its `RunOptions.terminate`, which
ends the run between kernels). What the chunk had computed is lost; nothing was written, so
the chunk is simply made again later. A `Stop` set before the call began ends it at its first
checkpoint; one set after it returned changes nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["Preempted", "Stop"]


class Preempted(Exception):
    """The synthesis was stopped on purpose (`Stop.set`) before it finished: not a failure."""

    def __init__(self) -> None:
        super().__init__("synthesis stopped to serve a listener first")


class Stop:
    """A flag one thread sets and the engine thread watches (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._set = False
        self._watchers: list[Callable[[], None]] = []

    def set(self) -> None:
        """Stop the call in flight (if any) at its next checkpoint; again is harmless."""
        with self._lock:  # watchers run under it: none runs once its block has ended
            if self._set:
                return
            self._set = True
            for watcher in self._watchers:
                watcher()

    def is_set(self) -> bool:
        return self._set

    def check(self) -> None:
        """Preempted if set: the checkpoint a runtime calls between its steps."""
        if self._set:
            raise Preempted

    @contextmanager
    def watching(self, on_set: Callable[[], None]) -> Iterator[None]:
        """Call `on_set` (from the setting thread; it must be quick and must not block) if
        the flag is set while inside, or at once if it already is; never after the block
        has ended."""
        with self._lock:
            if self._set:
                on_set()
            else:
                self._watchers.append(on_set)
        try:
            yield
        finally:
            with self._lock:
                if on_set in self._watchers:
                    self._watchers.remove(on_set)
