"""The store's failures in the callers' terms, translated once, where the service calls it.

    with store_trouble("reading a cast's records"):
        batch = await store.read(...)       # DurableError -> StoreUnavailable, one log line

Every store call the service makes for a door runs under `store_trouble` (an async generator
under `guarded`): a `DurableError` becomes `StoreUnavailable` (503 `store_unavailable`, chained
`from` the store's error) and one warning on `speechd.service` naming what was going on, the
store's own words with any cast id masked, never a traceback. A door answers it as any other
`SpeechdError` and logs nothing more of it. What a store error means for one read (a seq past
the end of a cast) is translated by that read, before this.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from typing import TypeVar

from speechd.durable import DurableError
from speechd.errors import StoreUnavailable

__all__ = ["guarded", "store_trouble"]

log = logging.getLogger("speechd.service")

T = TypeVar("T")

_ID_PREFIXES = ("casts/", "catalog/", "leases/", "input/")
_ID_CHARS = 22


def _mask_ids(text: str) -> str:
    """`text` with whatever follows a cast stream prefix masked: store errors name streams,
    and a cast id is a capability that logs must not hold. One scan per prefix."""
    for prefix in _ID_PREFIXES:
        at = text.find(prefix)
        while at != -1:
            start = at + len(prefix)
            text = text[:start] + "…" + text[start + _ID_CHARS :]
            at = text.find(prefix, start + 1)
    return text


@contextlib.contextmanager
def store_trouble(doing: str) -> Iterator[None]:
    """Raise `StoreUnavailable` for a `DurableError` raised inside, with the one log line
    (`doing` says what was going on)."""
    try:
        yield
    except DurableError as exc:
        log.warning(
            "store unavailable while %s: %s: %s", doing, type(exc).__name__, _mask_ids(str(exc))
        )
        raise StoreUnavailable() from exc


async def guarded(items: AsyncIterator[T], doing: str) -> AsyncGenerator[T, None]:
    """`items`, its store failures raised as `StoreUnavailable` (`store_trouble`); closed when
    its reader stops."""
    async with contextlib.aclosing(items):  # type: ignore[type-var]
        with store_trouble(doing):
            async for item in items:
                yield item
