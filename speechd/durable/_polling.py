"""The contract's `read`, once for every backend: its checks and its long poll at the tail.

    PolledStore.read    the stream's name, an open store, a seq that is not negative, at
                        least one record asked for; then the backend's raw read, and while
                        that finds nothing and `wait` runs, a wait for a wake-up between reads

A backend gives its raw read (`_read_now`: one snapshot of the tail and the records from a
seq, `SeqOutOfRange` outside the stream's records) and how a reader waiting at a tail hears
of an append (`_wakeups`: armed before each read, so an append that lands between the read
and the wait still wakes it); the loop around them is here.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
from typing import Protocol

from ._contract import MAX_BATCH_BYTES, ReadBatch, SeqOutOfRange, Store, validate_name

__all__ = ["PolledStore", "Wakeup"]


class Wakeup(Protocol):
    """A waiting reader's line to the appends of one stream."""

    def arm(self) -> asyncio.Future[None]:
        """A future an append to the stream (or a wake of every reader) resolves; one that
        ends every wait (the store closing) fails it."""
        ...

    def disarm(self, waiter: asyncio.Future[None]) -> None:
        """Forget `waiter` (resolved or not)."""
        ...


class PolledStore(Store):
    """A store whose `read` is the contract's checks and long poll around a backend's raw
    read (`_read_now`) and wake-ups (`_wakeups`)."""

    async def read(
        self,
        stream: str,
        seq_num: int = 0,
        *,
        max_records: int = 1000,
        max_bytes: int = MAX_BATCH_BYTES,
        wait: float = 0,
        bodies: bool = True,
    ) -> ReadBatch:
        validate_name(stream)
        if seq_num < 0:
            raise SeqOutOfRange(stream, seq_num, 0)
        max_records = max(1, max_records)
        if wait <= 0:
            self._check_open()
            return await self._read_now(stream, seq_num, max_records, max_bytes, bodies)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        self._check_open()
        async with self._wakeups(stream) as wakeup:
            while True:
                self._check_open()
                waiter = wakeup.arm()  # before the read: an append meanwhile still wakes it
                try:
                    batch = await self._read_now(stream, seq_num, max_records, max_bytes, bodies)
                    remaining = deadline - loop.time()
                    if batch.records or remaining <= 0:
                        return batch
                    try:
                        await asyncio.wait_for(waiter, remaining)
                    except asyncio.TimeoutError:
                        return batch
                finally:
                    wakeup.disarm(waiter)

    @abc.abstractmethod
    def _check_open(self) -> None:
        """Raise `StoreClosed` once the store is closed."""

    @abc.abstractmethod
    async def _read_now(
        self, stream: str, seq_num: int, max_records: int, max_bytes: int, bodies: bool
    ) -> ReadBatch:
        """The records from `seq_num` as the stream stands now (none at its tail), and its
        tail; `SeqOutOfRange` below its first seq or past its tail."""

    @abc.abstractmethod
    def _wakeups(self, stream: str) -> contextlib.AbstractAsyncContextManager[Wakeup]:
        """The wake-ups of `stream`, for as long as one reader waits at its tail."""
