"""Helpers for the gateway tests: real casts (speechd.audio's encoders) written through the
store contract as a worker writes them, a test app, a live server on loopback, and a raw HTTP
client that sends request targets byte for byte."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import httpx
import msgspec
import numpy as np
import uvicorn
from litestar import Litestar, Request, Response, get
from litestar.di import Provide
from litestar.exceptions import HTTPException, ValidationException

from speechd.audio import SAMPLE_RATE, new_encoder
from speechd.casts import (
    AudioChunk,
    Eos,
    Failure,
    Recipe,
    Start,
    Submission,
    audio_record,
    cast_id,
    cast_stream,
    deployment_secret,
    eos_record,
    error_record,
    start_record,
    submit,
)
from speechd.durable import Store
from speechd.errors import RateLimited, SpeechdError, UnknownVoice
from speechd.gateway import Gateway, GatewaySettings, NewCast, gateway_router

VOICES = ("af_heart", "am_adam", "bf_emma")


# -- audio ------------------------------------------------------------------------------


def tone(seconds: float, freq: float = 220.0) -> np.ndarray:
    """A test signal: float32 samples in [-1, 1] at SAMPLE_RATE."""
    t = np.arange(round(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    return (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


# -- casts written through the store ---------------------------------------------------


class DirectCasts:
    """A stand-in for the shared submit service: validates the voice, submits by claims."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def submit_cast(self, request: NewCast) -> Submission:
        voice = request.voice or VOICES[0]
        if voice not in VOICES:
            raise UnknownVoice(voice, list(VOICES))
        secret = await deployment_secret(self.store)
        model = request.model or "kokoro"
        text = request.input.strip()
        cid = cast_id(
            secret,
            model=model,
            voice=voice,
            speed=request.speed,
            format=request.response_format,
            text=text,
        )
        recipe = Recipe(
            text=text,
            model=model,
            voice=voice,
            speed=request.speed,
            format=request.response_format,
            title=request.title or "",
            created_ms=int(time.time() * 1000),
        )
        return await submit(self.store, cid, recipe, sample_rate=SAMPLE_RATE)


class CastWriter:
    """Plays the worker's part for one cast: start, audio chunks, eos or error."""

    def __init__(self, store: Store, cid: str, fmt: str, texts: Sequence[str]) -> None:
        self.store = store
        self.id = cid
        self.fmt = fmt
        self.texts = list(texts)
        self.attempt = 0
        self.offset_ms = 0
        self.index = 0
        self.bodies: list[bytes] = []  # the playable attempt's bodies, in order

    async def _append(self, record: Any) -> None:
        await self.store.append(cast_stream(self.id), [record])

    async def start(self) -> None:
        self.attempt += 1
        self.offset_ms = 0
        self.index = 0
        self.bodies = []
        self._encoder = new_encoder(self.fmt)  # a new attempt needs a new encoder
        await self._append(start_record(Start(self.attempt, "test-worker", len(self.texts))))

    async def chunk(self, seconds: float = 0.5) -> bytes:
        i = self.index
        last = i == len(self.texts) - 1
        body = self._encoder.encode(tone(seconds, 220.0 + 40.0 * i), final=last)
        duration = round(seconds * 1000)
        await self._append(
            audio_record(
                AudioChunk(
                    attempt=self.attempt,
                    index=i,
                    planned=len(self.texts),
                    offset_ms=self.offset_ms,
                    duration_ms=duration,
                    text=self.texts[i],
                    body=body,
                )
            )
        )
        self.offset_ms += duration
        self.index += 1
        self.bodies.append(body)
        return body

    async def eos(self) -> None:
        await self._append(eos_record(self.attempt, Eos(self.index, self.offset_ms, 10)))

    async def error(self, message: str) -> None:
        await self._append(error_record(self.attempt, Failure(message, self.attempt)))

    async def run(self, seconds: float = 0.5, gap_s: float = 0.0) -> None:
        """A whole attempt: start, every chunk (`gap_s` apart), eos."""
        await self.start()
        for _ in self.texts:
            if gap_s:
                await asyncio.sleep(gap_s)
            await self.chunk(seconds)
        await self.eos()

    @property
    def audio(self) -> bytes:
        return b"".join(self.bodies)


async def new_cast(
    store: Store,
    texts: Sequence[str],
    *,
    fmt: str = "wav",
    voice: str = "af_heart",
    title: str | None = None,
) -> CastWriter:
    """Submit a cast whose text is `texts` joined (its recipe is private) and return a writer."""
    casts = DirectCasts(store)
    request = NewCast(
        input=" ".join(texts), voice=voice, response_format=fmt, title=title or "A test cast"
    )
    submission = await casts.submit_cast(request)
    return CastWriter(store, submission.id, fmt, texts)


# -- the app ----------------------------------------------------------------------------


def _speechd_error(request: Request[Any, Any, Any], exc: SpeechdError) -> Response[Any]:
    """Until openai_compat lands: the OpenAI error shape, as its handlers will write it."""
    headers = {"retry-after": str(exc.retry_after)} if isinstance(exc, RateLimited) else None
    body = {
        "error": {"message": exc.message, "type": exc.type, "param": exc.param, "code": exc.code}
    }
    return Response(body, status_code=exc.status, headers=headers)


def _http_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    param, message = None, exc.detail
    if isinstance(exc, ValidationException) and isinstance(exc.extra, list) and exc.extra:
        first = exc.extra[0]
        if isinstance(first, dict):
            param, message = first.get("key"), first.get("message", message)
    body = {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": param,
            "code": None,
        }
    }
    return Response(body, status_code=exc.status_code)


@get("/v1/audio/voices")
async def _voices() -> dict[str, list[dict[str, str]]]:
    return {"voices": [{"id": v, "name": v} for v in VOICES]}


def make_app(gateway: Gateway) -> Litestar:
    async def provide() -> Gateway:
        return gateway

    return Litestar(
        route_handlers=[gateway_router(), _voices],
        dependencies={"gateway": Provide(provide)},
        exception_handlers={SpeechdError: _speechd_error, HTTPException: _http_error},
        on_shutdown=[gateway.close],
        debug=False,
    )


def make_gateway(store: Store, **settings: Any) -> Gateway:
    return Gateway(store, GatewaySettings(**settings), casts=DirectCasts(store))


async def until(predicate: Callable[[], bool], within_s: float = 5.0) -> None:
    """Wait until `predicate()` holds (polling), or fail after `within_s` seconds."""
    for _ in range(int(within_s / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {predicate}")


# -- a live server on loopback ----------------------------------------------------------


@contextlib.asynccontextmanager
async def asgi_client(app: Litestar) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver.local") as c:
        yield c


class LiveServer:
    def __init__(self, server: uvicorn.Server, port: int) -> None:
        self.server = server
        self.port = port
        self.url = f"http://127.0.0.1:{port}"


@contextlib.asynccontextmanager
async def live_server(app: Litestar) -> AsyncIterator[LiveServer]:
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level="warning", lifespan="on", ws="none"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield LiveServer(server, port)
    finally:
        server.should_exit = True
        await task


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


__all__ = [
    "VOICES",
    "CastWriter",
    "DirectCasts",
    "LiveServer",
    "RawResponse",
    "asgi_client",
    "dechunk",
    "live_server",
    "make_app",
    "make_gateway",
    "new_cast",
    "raw_get",
    "sse_events",
    "tone",
    "until",
]
