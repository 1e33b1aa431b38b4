"""A per-client token bucket for the public read path.

Each client key (an address) holds a bucket of `burst` tokens that refills at `rate` per second;
a read takes one token. The table is bounded: past `max_clients` keys the least recently seen
is forgotten, which can only ever be generous (a forgotten client starts with a full bucket).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable

__all__ = ["ReadLimiter"]


class ReadLimiter:
    def __init__(
        self,
        rate: float,
        burst: int,
        *,
        max_clients: int = 65536,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._max_clients = max_clients
        self._clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (tokens, t)

    def take(self, key: str) -> float | None:
        """Take one token for `key`: None if granted, else the seconds until one is available."""
        now = self._clock()
        tokens, last = self._buckets.pop(key, (self._burst, now))
        tokens = min(self._burst, tokens + (now - last) * self._rate)
        if tokens >= 1.0:
            self._buckets[key] = (tokens - 1.0, now)
            granted = True
        else:
            self._buckets[key] = (tokens, now)
            granted = False
        while len(self._buckets) > self._max_clients:
            self._buckets.popitem(last=False)
        return None if granted else (1.0 - tokens) / self._rate

    @staticmethod
    def retry_after(wait_s: float) -> int:
        """`Retry-After` wants whole seconds; never advise 0."""
        return max(1, math.ceil(wait_s))
