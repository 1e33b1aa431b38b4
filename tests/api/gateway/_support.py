"""Helpers for the gateway tests: the real app (`create_app`, its error handlers, the shared
`CastService`) over a real embedded store, served by uvicorn on loopback in the test's own
event loop; casts made by the real `speechd.worker.Worker` in-process, with the cost-model
engine double (tests/worker/_fakes.py) held to a pace the test sets and speechd.audio's
encoders; and a raw HTTP client that sends request targets byte for byte."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import msgspec
import uvicorn
from litestar import Litestar

from harness.engines import CostEngine, FakeChunk, FakeChunkPolicy, FakeSynthesis
from speechd.api.app import close_streams, create_app
from speechd.api.gateway import Gateway, GatewaySettings
from speechd.audio import SAMPLE_RATE, new_encoder
from speechd.casts import CastStatus, cast_status
from speechd.casts._records import audio_chunk
from speechd.casts.schema import Event, Start, decode, event_of
from speechd.config import Settings
from speechd.durable import Store
from speechd.worker import Worker, WorkerConfig
from speechd.worker._protocols import EncoderFactory
from tests.support.streams import read_cast as read_all

__all__ = [
    "VOICES",
    "LiveServer",
    "RawResponse",
    "StepEngine",
    "attempt_bodies",
    "chunk_texts",
    "dechunk",
    "live_server",
    "raw_get",
    "read_all",
    "running_worker",
    "serve",
    "sse_events",
    "status_when",
    "submit",
    "until",
    "whole_file",
]

VOICES = tuple(CostEngine.voices.installed)


# -- the worker's engine, at the test's pace ----------------------------------------------


class StepEngine(CostEngine):
    """The cost model, free-running until `hold()`; then each `allow(n)` lets n more chunks
    be synthesized (a chunk that raises takes its step too), and `run_free()` lets all."""

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self._turn = threading.Condition()
        self._allowed = 0
        self._free = True

    def hold(self) -> None:
        with self._turn:
            self._free = False

    def allow(self, chunks: int = 1) -> None:
        with self._turn:
            self._allowed += chunks
            self._turn.notify_all()

    def run_free(self) -> None:
        with self._turn:
            self._free = True
            self._turn.notify_all()

    def synthesize(
        self, chunk: FakeChunk, voice: str, speed: float, *, seed: int | None = None
    ) -> FakeSynthesis:
        with self._turn:
            self._turn.wait_for(lambda: self._free or self._allowed > 0)
            if not self._free:
                self._allowed -= 1
        return super().synthesize(chunk, voice, speed, seed=seed)

    def durations(self, text: str, speed: float = 1.0) -> list[float]:
        """Each chunk's audio seconds, as the worker will make them."""
        return [
            round(self.audio_s(t, speed) * SAMPLE_RATE) / SAMPLE_RATE for t in chunk_texts(text)
        ]


def chunk_texts(text: str) -> list[str]:
    """The captions the worker will publish for `text`: the cost model's plan."""
    return [c.text for c in CostEngine().plan(text, VOICES[0], FakeChunkPolicy())]


@contextlib.asynccontextmanager
async def running_worker(
    store: Store, engine: StepEngine, encoders: EncoderFactory = new_encoder
) -> AsyncIterator[Worker]:
    """The real worker loop on `store`, in a task of this event loop, first come first served
    (the deadline policy would idle once a cast is far enough ahead of its listener)."""
    worker = Worker(
        store,
        engine,
        WorkerConfig(worker_id="gateway-tests", policy="fifo", heartbeat_s=2.0),
        chunk_policy=FakeChunkPolicy(),
        encoders=encoders,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        yield worker
    finally:
        stop.set()
        engine.run_free()  # a chunk held in the engine must end for the worker to stop
        await asyncio.wait_for(task, 30)
        await worker.idle()


# -- the app on loopback --------------------------------------------------------------------


class LiveServer(msgspec.Struct):
    app: Litestar
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def gateway(self) -> Gateway:
        gateway: Gateway = self.app.state.gateway
        return gateway


@contextlib.asynccontextmanager
async def live_server(app: Litestar) -> AsyncIterator[LiveServer]:
    """`app` under uvicorn on a free loopback port, shut down as `speechd` shuts it down."""
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        log_level="warning",
        lifespan="on",
        ws="none",
        proxy_headers=False,  # as `speechd api` runs it
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield LiveServer(app, port)
    finally:
        await close_streams(app)
        server.should_exit = True
        await task


@contextlib.asynccontextmanager
async def serve(
    store: Store, settings: Settings | None = None, gateway: GatewaySettings | None = None
) -> AsyncIterator[LiveServer]:
    """`create_app` over `store` (settings default: open, no keys), live on loopback."""
    app = create_app(settings or Settings(data_dir="unused"), store=store, gateway=gateway)
    async with live_server(app) as live:
        yield live


# -- casts --------------------------------------------------------------------------------


async def submit(http: httpx.AsyncClient, text: str, **fields: Any) -> str:
    """`POST /v1/casts`; the new cast's id."""
    response = await http.post("/v1/casts", json={"input": text, **fields})
    assert response.status_code in (200, 201), response.text
    cast_id: str = response.json()["id"]
    return cast_id


async def until(predicate: Callable[[], bool], within_s: float = 30.0) -> None:
    """Wait until `predicate()` holds (polling); a failsafe, not a timing assertion."""
    deadline = time.monotonic() + within_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {predicate}")
        await asyncio.sleep(0.01)


async def status_when(
    store: Store, cast_id: str, check: Callable[[CastStatus], bool], within_s: float = 30.0
) -> CastStatus:
    """The cast's status once `check` holds for it (polling the store)."""
    deadline = time.monotonic() + within_s
    while True:
        status = await cast_status(store, cast_id, now_ms=time.time_ns() // 1_000_000)
        if check(status):
            return status
        if time.monotonic() > deadline:
            raise AssertionError(f"cast {cast_id} never got there; last: {status}")
        await asyncio.sleep(0.02)


async def attempt_bodies(store: Store, cast_id: str) -> list[bytes]:
    """The audio bodies of the cast's playable sequence, in order (the file, record by
    record): the latest start's kept spans, then its attempt's own audio."""
    records = await read_all(store, cast_id)
    starts = [i for i, r in enumerate(records) if event_of(r) == Event.START]
    if not starts:
        return []
    start = decode(records[starts[-1]].body, Start)
    kept = [records[span.seq + k] for span in start.kept for k in range(span.count)]
    own = [r for r in records[starts[-1] :] if event_of(r) == Event.AUDIO]
    return [audio_chunk(r).body for r in [*kept, *own]]


def whole_file(bodies: list[bytes], fmt: str = "wav") -> bytes:
    """The finished file of these records: their bytes, a wav with its true RIFF and data
    sizes in place of the streaming header's 0xFFFFFFFF (written out here, not with the
    server's own function)."""
    data = bytearray(b"".join(bodies))
    if fmt == "wav":
        data[4:8] = struct.pack("<I", len(data) - 8)
        data[40:44] = struct.pack("<I", len(data) - 44)
    return bytes(data)


# -- raw HTTP -----------------------------------------------------------------------------


class RawResponse(msgspec.Struct):
    status: int
    headers: dict[str, str]
    body: bytes


async def raw_get(port: int, target: str, headers: dict[str, str] | None = None) -> RawResponse:
    """GET `target` exactly as given (no normalising of `..` or `%2F`), HTTP/1.0-style close."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    lines = [f"GET {target} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    await writer.drain()
    data = await reader.read()
    writer.close()
    await writer.wait_closed()
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    parsed = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        parsed[name.strip().lower()] = value.strip()
    if parsed.get("transfer-encoding") == "chunked":
        body = dechunk(body)
    return RawResponse(int(status_line.split()[1]), parsed, body)


def dechunk(data: bytes) -> bytes:
    out = bytearray()
    while data:
        size_line, _, rest = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += rest[:size]
        data = rest[size + 2 :]
    return bytes(out)


def sse_events(text: str) -> list[dict[str, str]]:
    """Parse SSE text into events (dicts of field -> value); comments are skipped."""
    events = []
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(": ")
            fields[name] = value
        if fields:
            events.append(fields)
    return events
