"""The three ways `POST /v1/audio/speech` answers with a cast's audio.

All three read the same cast with `CastService.audio`, the same bytes any identical request
reads; a client that goes away stops only its own reading, never the cast.

* `audio` (default): the bytes as the worker appends them, chunked, one valid file.
* `stream: false`: waits for `eos`, then the whole file with `Content-Length`.
* `sse`: `speech.audio.delta` events (base64 audio), then `speech.audio.done` with usage.

The first chunk is awaited before the response starts, so a cast that fails before any audio
is an ordinary error response with its status. A failure after that cannot change the status:
an SSE stream ends with an `error` event; a raw audio stream is aborted (the connection closes
without the final chunk), so the client sees an incomplete transfer rather than a short file
that looks whole.
"""

from __future__ import annotations

import base64
import logging
import math
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any, Literal

import msgspec
from litestar import Response
from litestar.response import Stream

from speechd.audio import content_type
from speechd.errors import SpeechdError
from speechd.metrics import ApiMetrics
from speechd.service import CastService, SubmittedCast

from ._errors import error_body, error_body_for

__all__ = ["OUTPUT_TOKENS_PER_SECOND", "Mode", "speech_response"]

log = logging.getLogger("speechd.api")

Mode = Literal["audio", "whole", "sse"]

OUTPUT_TOKENS_PER_SECOND = 50
"""`usage.output_tokens` counts one token per 20 ms of audio (speechd has no audio tokenizer);
`usage.input_tokens` counts the input's characters."""

_json = msgspec.json.Encoder()


Chunks = AsyncGenerator[bytes, None]


async def _first_audio_then_rest(chunks: Chunks, started: float, metrics: ApiMetrics) -> Chunks:
    """Wait for the first chunk (or the cast's failure) now; return a generator of them all."""
    try:
        first: bytes | None = await anext(chunks)
    except StopAsyncIteration:
        first = None
    except BaseException:
        await chunks.aclose()
        raise
    if first is not None:
        metrics.first_audio(time.monotonic() - started)

    async def replay() -> Chunks:
        async with aclosing(chunks):
            if first is not None:
                yield first
            async for chunk in chunks:
                yield chunk

    return replay()


async def _raw(cast_id: str, chunks: Chunks) -> AsyncIterator[bytes]:
    async with aclosing(chunks):
        try:
            async for chunk in chunks:
                yield chunk
        except SpeechdError as exc:
            # Raising after the headers went out makes the server drop the connection without
            # the terminating chunk: the client sees an incomplete body, not a short file.
            log.warning("cast %s failed mid-stream, aborting the response: %s", cast_id, exc)
            raise


def _event(payload: dict[str, Any]) -> bytes:
    return b"data: " + _json.encode(payload) + b"\n\n"


async def _sse(service: CastService, cast: SubmittedCast, chunks: Chunks) -> AsyncIterator[bytes]:
    async with aclosing(chunks):
        try:
            async for chunk in chunks:
                audio = base64.b64encode(chunk).decode()
                yield _event({"type": "speech.audio.delta", "audio": audio})
            status = await service.status(cast.id)
        except SpeechdError as exc:
            log.warning("cast %s failed mid-stream: %s", cast.id, exc)
            yield _event({"type": "error", **error_body_for(exc)})
            return
        except Exception:
            log.exception("reading cast %s failed mid-stream", cast.id)
            body = error_body("The server had an error while reading the cast.", "server_error")
            yield _event({"type": "error", **body})
            return
    input_tokens = len(cast.recipe.text)
    output_tokens = math.ceil(status.audio_ms * OUTPUT_TOKENS_PER_SECOND / 1000)
    usage = {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "total_tokens": input_tokens + output_tokens,
    }
    yield _event({"type": "speech.audio.done", "usage": usage})


async def speech_response(
    service: CastService,
    metrics: ApiMetrics,
    cast: SubmittedCast,
    *,
    mode: Mode,
    started: float,
    headers: dict[str, str],
) -> Response[Any]:
    """The response for `cast` in `mode`; raises (before any byte) if the cast failed early."""
    chunks = await _first_audio_then_rest(service.audio(cast.id), started, metrics)
    if mode == "sse":
        sse_headers = {**headers, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return Stream(
            _sse(service, cast, chunks), media_type="text/event-stream", headers=sse_headers
        )
    media_type = content_type(cast.recipe.format)
    if mode == "whole":
        async with aclosing(chunks):
            body = b"".join([chunk async for chunk in chunks])
        return Response(body, media_type=media_type, headers=headers)
    return Stream(_raw(cast.id, chunks), media_type=media_type, headers=headers)
