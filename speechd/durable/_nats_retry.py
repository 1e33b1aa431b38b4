"""Retrying NATS requests through failovers and restarts, and the one place their wire errors
become the store's `DurableError`."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ._contract import DurableError
from ._nats_wire import ApiError, NoAnswer, WireError

__all__ = ["Backoff", "Retry", "retrying"]

T = TypeVar("T")


class Backoff:
    """Growing, jittered sleeps between attempts, within a deadline."""

    def __init__(self) -> None:
        self._delay = 0.005

    async def wait(self, deadline: float, doing: str, cause: Exception) -> None:
        loop = asyncio.get_running_loop()
        delay = self._delay * random.uniform(0.5, 1.5)
        if loop.time() + delay > deadline:
            raise DurableError(f"{doing}: gave up: {cause}") from cause
        await asyncio.sleep(delay)
        self._delay = min(self._delay * 2, 0.5)


async def retrying(
    doing: str,
    call: Callable[[], Awaitable[T]],
    retry_s: float,
    check: Callable[[], None] | None = None,
) -> T:
    """`call()`, again after `NoAnswer` or a transient JetStream error, for up to `retry_s`."""
    deadline = asyncio.get_running_loop().time() + retry_s
    backoff = Backoff()
    while True:
        if check is not None:
            check()
        try:
            return await call()
        except NoAnswer as exc:
            await backoff.wait(deadline, doing, exc)
        except ApiError as exc:
            if not exc.transient:
                raise
            await backoff.wait(deadline, doing, exc)


class Retry:
    """`await retry(doing, call)`: `retrying` within this handle's budget, checking that the
    store is open before each try; what still fails is a `DurableError`, chained."""

    def __init__(self, retry_s: float, check_open: Callable[[], None]) -> None:
        self.retry_s = retry_s
        self.check_open = check_open

    async def __call__(self, doing: str, call: Callable[[], Awaitable[T]]) -> T:
        self.check_open()
        try:
            return await retrying(doing, call, self.retry_s, self.check_open)
        except WireError as exc:
            raise DurableError(f"{doing} failed: {exc}") from exc
