"""Helpers for the Wyoming tests: the door and the real worker (on the cost-model engine) in
this event loop over one embedded store, clients of the `wyoming` package's own, and readers
of what a synthesis sent."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncClient, AsyncUnixClient
from wyoming.error import Error
from wyoming.event import Event
from wyoming.tts import SynthesizeStopped

from speechd import casts
from speechd.audio import new_encoder
from speechd.config import Settings
from speechd.durable import Store
from speechd.limits import StreamSlots
from speechd.service import CastService, LiveCasts
from speechd.worker import Worker, WorkerConfig
from speechd.wyoming import WyomingDoor
from tests.support.engines import CostEngine, FakeChunkPolicy

__all__ = ["Heard", "Served", "hear", "served"]

READ_S = 30.0  # a failsafe far above any answer here, not a timing assertion


@dataclass
class Served:
    door: WyomingDoor
    worker: Worker
    engine: Any
    path: Path

    def client(self) -> AsyncClient:
        return AsyncUnixClient(str(self.path))


@contextlib.asynccontextmanager
async def served(
    store: Store,
    folder: Path,
    *,
    engine: Any = None,
    slots: StreamSlots | None = None,
    settings: Settings | None = None,
    worker: bool = True,
    **door: Any,
) -> AsyncIterator[Served]:
    """The door on a unix socket in `folder` over `store`, and the real worker (on the cost
    model unless `engine` says otherwise) in this event loop; `door`: more `WyomingDoor`
    arguments (`idle_s`, `send_timeout_s`, `public_url`, `start`)."""
    settings = settings or Settings(data_dir="unused", max_queue=16)
    engine = engine or CostEngine(audio_per_char=0.01)
    running = Worker(
        store,
        engine,
        WorkerConfig(worker_id="wyoming-tests"),
        chunk_policy=FakeChunkPolicy(),
        encoders=new_encoder,
    )
    stop = asyncio.Event()
    working = asyncio.create_task(running.run(stop)) if worker else None
    config = settings.engine_config()
    secret = await casts.deployment_secret(store)
    service = CastService(
        store,
        secret,
        max_queue=settings.max_queue,
        default_voice=config.default_voice,
        voice_map=config.voice_map,
    )
    path = folder / "wyoming.sock"
    opened = WyomingDoor(
        f"unix://{path}",
        service=service,
        live=LiveCasts(service, secret, idle_s=settings.live_idle_timeout),
        slots=slots or StreamSlots(64, 16),
        default_voice=config.default_voice,
        voice_map=config.voice_map,
        **door,
    )
    try:
        await opened.start()
        if worker:
            await _ready(service)
        yield Served(opened, running, engine, path)
    finally:
        await opened.close()
        if working is not None:
            stop.set()
            await asyncio.wait_for(working, 30)
            await running.idle()


async def _ready(service: CastService, within_s: float = 30.0) -> None:
    deadline = time.monotonic() + within_s
    while not await service.workers():
        if time.monotonic() > deadline:
            raise AssertionError("the worker never became ready")
        await asyncio.sleep(0.02)


@dataclass
class Heard:
    """What a client read for one synthesis, each event with when it came."""

    events: list[tuple[float, Event]] = field(default_factory=list)

    def of(self, kind: str) -> list[Event]:
        return [e for _, e in self.events if e.type == kind]

    @property
    def kinds(self) -> list[str]:
        return [e.type for _, e in self.events]

    @property
    def audio(self) -> bytes:
        return b"".join(AudioChunk.from_event(e).audio for e in self.of("audio-chunk"))

    @property
    def start(self) -> AudioStart:
        return AudioStart.from_event(self.of("audio-start")[0])

    @property
    def errors(self) -> list[Error]:
        return [Error.from_event(e) for e in self.of("error")]

    def first(self, kind: str) -> float:
        return next(t for t, e in self.events if e.type == kind)


async def hear(
    client: AsyncClient, *, until: str = AudioStop().event().type, read_s: float = READ_S
) -> Heard:
    """Read events until one of kind `until` (or an `error` while no audio started), or the
    connection closes; `read_s`: the failsafe for each event."""
    heard = Heard()
    while True:
        event = await asyncio.wait_for(client.read_event(), read_s)
        if event is None:
            return heard
        heard.events.append((time.monotonic(), event))
        if event.type == until:
            return heard
        if Error.is_type(event.type) and "audio-start" not in heard.kinds:
            return heard


STOPPED = SynthesizeStopped().event().type
