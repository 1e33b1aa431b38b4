"""Giving the model back while there is nothing to make, and taking it again for the next
chunk (`--idle-unload`): `ModelKeeper`.

The loop calls it at two points and nowhere else: `idle` whenever the policy has nothing to
run (it gives the model back once there has been nothing to make for `after_s`, and says how
long the loop may rest before that is due), and `ready` before each chunk is rendered (it
takes the model again if it was given back, and waits for it). Both run the engine's calls on
the engine thread, so a load never overlaps a chunk; while the model loads the loop waits,
the other side tasks go on (the heartbeat says `waking`, intake reads the jobs that arrive,
and they are admitted as soon as the model is held). The load is never inside a chunk's
measured time: the chunk that waited for it is timed from when the model was ready, so
neither the device's measured costs nor a cast's start hold count the load.

What the worker says meanwhile: every notice carries `state` ("" held, `idle`, `waking`) and
`fallback` (the engine's, when it left its device for the CPU); the telemetry's
`ModelReadings` carry the figures (the last load and wake times, RSS before and after the
last unload, the device memory held and the budget), which /metrics and `speechd top` show.
An engine without `unload` (a test's cost model) is simply kept.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from speechd.casts import IDLE, WAKING

from ._thread import EngineThread

if TYPE_CHECKING:
    from speechd.telemetry import Telemetry

__all__ = ["ModelKeeper", "ResidentEngine"]

log = logging.getLogger("speechd.worker")


@runtime_checkable
class ResidentEngine(Protocol):
    """An engine that can give its model back and take it again (`speechd.engine.Engine`)."""

    @property
    def resident(self) -> bool: ...
    def unload(self) -> None: ...
    def load(self) -> float: ...


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class ModelKeeper:
    """The model's residency for one worker (see the module's docstring). `after_s` None
    keeps the model for good; `announce` writes a notice (the worker's heartbeat), so a
    change of state is seen at once rather than at the next beat."""

    def __init__(
        self,
        engine: Any,
        thread: EngineThread,
        *,
        after_s: float | None,
        announce: Callable[[], Awaitable[None]],
        clock: Callable[[], float] = time.monotonic,
        telemetry: Telemetry | None = None,
    ) -> None:
        self._engine = engine
        self._resident_engine = engine if isinstance(engine, ResidentEngine) else None
        self._thread = thread
        self._after_s = after_s if self._resident_engine is not None else None
        self._announce = announce
        self._clock = clock
        self._telemetry = telemetry
        self._idle_since: float | None = None
        self.state = ""
        """Where the model is: "" held, `idle` given back, `waking` being taken again."""
        self.unloads = 0
        self.wakes = 0
        self._since_ms = _now_ms()
        self._load_s: float | None = getattr(engine, "load_s", None) or None
        self._wake_s: float | None = None
        self._rss_held: int | None = None
        self._rss_unloaded: int | None = None
        if after_s is not None and self._resident_engine is None:
            log.warning("--idle-unload: this engine cannot give its model back; it keeps it")
        self._report()

    @property
    def fallback(self) -> str:
        """Why the engine speaks on the CPU rather than the device it was asked for."""
        return str(getattr(self._engine, "fallback", "") or "")

    async def idle(self, rest_s: float, *, nothing: bool) -> float:
        """The policy has nothing to run: `nothing` says whether the worker has no cast at
        all (a live cast waiting for text is not nothing). Gives the model back once that has
        lasted `after_s`; returns how long the loop may rest (`rest_s` at most)."""
        if not nothing:
            self._idle_since = None
            return rest_s
        if self._after_s is None or self.state:
            return rest_s
        now = self._clock()
        if self._idle_since is None:
            self._idle_since = now
        due = self._idle_since + self._after_s - now
        if due > 0:
            return min(rest_s, due)
        await self._unload()
        return rest_s

    async def ready(self) -> None:
        """Before a chunk: the model held (taken again, and waited for, if it was given
        back)."""
        self._idle_since = None
        if self.state == IDLE:
            await self._wake()
        self._report()

    async def _unload(self) -> None:
        engine = self._resident_engine
        assert engine is not None
        held = self._rss()
        started = time.perf_counter()
        await self._thread.call(engine.unload)
        self._rss_held, self._rss_unloaded = held, self._rss()
        self.unloads += 1
        self.state, self._since_ms = IDLE, _now_ms()
        log.info(
            "model given back after %.0f s with nothing to make (%.2f s)%s",
            self._after_s or 0.0,
            time.perf_counter() - started,
            _freed(held, self._rss_unloaded),
        )
        self._report()
        await self._announce()

    async def _wake(self) -> None:
        engine = self._resident_engine
        assert engine is not None
        started = time.perf_counter()
        self.state, self._since_ms = WAKING, _now_ms()
        self._report()
        await self._announce()
        self._load_s = await self._thread.call(engine.load) or self._load_s
        self._wake_s = time.perf_counter() - started
        self.wakes += 1
        self.state, self._since_ms = "", _now_ms()
        log.info("model taken again for a cast in %.2f s", self._wake_s)
        self._report()
        await self._announce()

    def _rss(self) -> int | None:
        return self._telemetry.resident_bytes() if self._telemetry is not None else None

    def _report(self) -> None:
        if self._telemetry is None:
            return
        from speechd.telemetry import ModelReadings

        held_bytes = getattr(self._engine, "held_bytes", None)
        memory = getattr(self._engine, "memory", None)
        self._telemetry.model(
            ModelReadings(
                resident=self.state != IDLE,
                since_ms=self._since_ms,
                load_s=None if self._load_s is None else round(self._load_s, 3),
                wake_s=None if self._wake_s is None else round(self._wake_s, 3),
                unloads=self.unloads,
                wakes=self.wakes,
                rss_held_bytes=self._rss_held,
                rss_unloaded_bytes=self._rss_unloaded,
                device_held_bytes=held_bytes() if callable(held_bytes) else None,
                device_budget_bytes=getattr(memory, "limit", None),
            )
        )


def _freed(held: int | None, unloaded: int | None) -> str:
    if held is None or unloaded is None:
        return ""
    return f": RSS {held / (1 << 20):.0f} -> {unloaded / (1 << 20):.0f} MiB"
