"""Helpers for the live-cast tests: a simulated LLM, the real app under uvicorn (WebSockets
on) with the real worker in the same event loop on the cost-model engine, and readers of what
a cast holds."""

from __future__ import annotations

import asyncio
import contextlib
import io
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import av
import httpx
import uvicorn
from litestar import Litestar

from speechd.api import MAX_WS_MESSAGE_BYTES
from speechd.api.app import close_streams, create_app
from speechd.audio import new_encoder
from speechd.casts import follow_cast
from speechd.casts.schema import AudioChunk, Event, event_of
from speechd.config import Settings
from speechd.durable import Record, Store
from speechd.text import FLUSH_S
from speechd.worker import QUANTUM_S, Worker, WorkerConfig
from tests.support.engines import CostEngine, FakeChunkPolicy
from tests.support.streams import read_cast as read_all

__all__ = [
    "REPLY",
    "LiveApp",
    "SimulatedLlm",
    "decoded_seconds",
    "playable",
    "read_all",
    "serve",
    "wait_done",
]

REPLY = (
    "Sure, here is how owls hunt at night. They rely mostly on hearing, which is so precise "
    "that some can catch prey they cannot see. Their faces funnel sound toward ears set at "
    "different heights; the brain tells up from down. Soft feathers let them glide in "
    "silence, and when one hears a mouse under the snow, it drops and strikes!"
)


@dataclass
class SimulatedLlm:
    """A chat model's reply streamed as tokens (words with their leading space, long words
    in two pieces) at `rate` tokens a second, pausing `pauses[n]` seconds before token n."""

    text: str = REPLY
    rate: float = 200.0
    pauses: dict[int, float] = field(default_factory=dict)

    @property
    def tokens(self) -> list[str]:
        out: list[str] = []
        for n, word in enumerate(self.text.split(" ")):
            lead = " " if n else ""
            out += [lead + word[:4], word[4:]] if len(word) > 7 else [lead + word]
        return out

    def mid_sentence(self) -> list[int]:
        """Token numbers that fall inside a clause (a pause there tests the flush)."""
        return [n for n, t in enumerate(self.tokens) if n > 3 and t[-1:].isalpha()]

    async def stream(self) -> AsyncIterator[str]:
        for n, token in enumerate(self.tokens):
            await asyncio.sleep(self.pauses.get(n, 1.0 / self.rate))
            yield token


@dataclass
class LiveApp:
    app: Litestar
    port: int
    worker: Worker
    engine: Any

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/audio/speech/live"


@contextlib.asynccontextmanager
async def serve(
    store: Store,
    *,
    settings: Settings | None = None,
    engine: Any = None,
    flush_s: float = FLUSH_S,
    chunk_policy: Any = None,
    clock: Callable[[], float] = time.monotonic,
    quantum_s: float = QUANTUM_S,
) -> AsyncIterator[LiveApp]:
    """The app on `store` under uvicorn on loopback (as `speechd api` serves it, WebSockets
    on) and the real worker (on the cost model, unless `engine` and `chunk_policy` say
    otherwise), both in this event loop; `flush_s`: how long the worker lets an unfinished
    clause wait for more text; `clock` and `quantum_s`: the worker's (its listeners' clock,
    and the chunk cost that sets how far ahead a live cast's next chunk waits for text)."""
    engine = engine or CostEngine(audio_per_char=0.01)
    worker = Worker(
        store,
        engine,
        WorkerConfig(worker_id="live-tests", flush_s=flush_s, quantum_s=quantum_s),
        chunk_policy=chunk_policy or FakeChunkPolicy(),
        encoders=new_encoder,
        clock=clock,
    )
    stop = asyncio.Event()
    working = asyncio.create_task(worker.run(stop))
    app = create_app(settings or Settings(data_dir="unused"), store=store)
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        log_level="warning",
        lifespan="on",
        proxy_headers=False,
        ws_max_size=MAX_WS_MESSAGE_BYTES,
    )
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    while not server.started:
        if serving.done():
            serving.result()
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            await _ready(http)
        yield LiveApp(app, port, worker, engine)
    finally:
        await close_streams(app)
        server.should_exit = True
        await serving
        stop.set()
        await asyncio.wait_for(working, 30)
        await worker.idle()


async def _ready(http: httpx.AsyncClient, within_s: float = 30.0) -> None:
    deadline = time.monotonic() + within_s
    while (await http.get("/readyz")).status_code != 200:
        if time.monotonic() > deadline:
            raise AssertionError("the worker never became ready")
        await asyncio.sleep(0.02)


async def wait_done(store: Store, cast_id: str, within_s: float = 60.0) -> list[Record]:
    """The cast's records once it ends (eos or error); a failsafe, not a timing assertion."""
    deadline = time.monotonic() + within_s
    while True:
        records = await read_all(store, cast_id)
        if records and event_of(records[-1]) in (Event.EOS, Event.ERROR):
            return records
        if time.monotonic() > deadline:
            raise AssertionError(f"cast {cast_id} did not end: {[event_of(r) for r in records]}")
        await asyncio.sleep(0.05)


async def playable(store: Store, cast_id: str) -> list[AudioChunk]:
    """The playable sequence's audio records of a cast that ended, as every reader reads it
    (`speechd.casts.follow_cast`)."""
    follow = follow_cast(store, cast_id)
    return [event async for event in follow if isinstance(event, AudioChunk)]


def decoded_seconds(fmt: str, data: bytes) -> float:
    """The audio in `data`, decoded as one file of `fmt` (raises if it is not one)."""
    if fmt == "pcm":
        return len(data) / 2 / 24_000
    with av.open(io.BytesIO(data), format=fmt) as container:
        samples = sum(frame.samples for frame in container.decode(audio=0))
    return samples / 24_000
