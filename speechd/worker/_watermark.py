"""The jobs watermark: the committed cursor moves only over a contiguous run of finished jobs."""

from __future__ import annotations

import heapq

__all__ = ["Watermark"]


class Watermark:
    """Offsets of `jobs` read from `base` on, each open until `finish`ed.

    `committed` is the first offset not yet finished: every job below it is finished, so a
    worker restarting from it loses nothing. A short job 10 finishing before a long job 7
    leaves `committed` at 7 until 7 finishes too.
    """

    def __init__(self, base: int = 0) -> None:
        self._next = base  # one past the highest offset read
        self._open: set[int] = set()
        self._heap: list[int] = []  # open offsets, lazily pruned of finished ones

    @property
    def committed(self) -> int:
        while self._heap and self._heap[0] not in self._open:
            heapq.heappop(self._heap)
        return self._heap[0] if self._heap else self._next

    @property
    def open(self) -> int:
        """How many jobs are read but not finished."""
        return len(self._open)

    def add(self, offset: int) -> None:
        """Open the job at `offset`; offsets arrive in order, each once, with no holes."""
        if offset != self._next:
            raise ValueError(f"job offset {offset} is not the next one ({self._next})")
        self._next = offset + 1
        self._open.add(offset)
        heapq.heappush(self._heap, offset)

    def skip_to(self, offset: int) -> None:
        """Jump the read position to `offset`: the offsets between were never read here
        because they are finished already (trimmed from `jobs` below the committed cursor).
        Jobs read and still open stay open."""
        self._next = max(self._next, offset)

    def finish(self, offset: int) -> None:
        """Mark the job at `offset` finished (again is harmless)."""
        self._open.discard(offset)
