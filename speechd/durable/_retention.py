"""Age-based retention: a background sweep that removes streams nobody appended to lately."""

from __future__ import annotations

import asyncio
import logging

import msgspec

from ._contract import DurableError, Spare, Store, StoreClosed

__all__ = ["Retention", "sweep_forever"]

log = logging.getLogger("speechd.durable")


class Retention(msgspec.Struct, frozen=True):
    """Remove streams under `prefixes` after `max_age_s` seconds without an append."""

    max_age_s: float
    prefixes: tuple[str, ...]

    @property
    def interval_s(self) -> float:
        return min(max(self.max_age_s / 10, 0.05), 60.0)


async def sweep_forever(store: Store, retention: Retention, *, spare: Spare | None = None) -> None:
    """Sweep every `retention.interval_s` until cancelled or the store closes (`spare`: as
    `Store.sweep` takes it).

    A failed sweep is logged, not fatal: the next interval tries again.
    """
    while True:
        try:
            removed = await store.sweep(retention.max_age_s, retention.prefixes, spare=spare)
        except StoreClosed:
            return
        except DurableError:
            log.exception("retention sweep failed; trying again next interval")
        else:
            if removed:
                log.info("retention removed %d streams", removed)
        await asyncio.sleep(retention.interval_s)
