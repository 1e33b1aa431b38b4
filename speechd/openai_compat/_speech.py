"""The three ways `POST /v1/audio/speech` answers with a cast's audio.

All three read the same cast with `CastService.audio`, the same bytes any identical request
reads; a client that goes away stops only its own reading, never the cast.

* `audio` (default): the bytes as the worker appends them, chunked, one valid file.
* `stream: false`: waits for `eos`, then the whole file with `Content-Length` (a wav with
  its true sizes in the header: `speechd.audio.finished_bytes`).
* `sse`: `speech.audio.delta` events (base64 audio), then `speech.audio.done` with usage.

The first chunk is awaited before the response starts, so a cast that fails before any audio
is an ordinary error response with its status. A failure after that cannot change the status:
an SSE stream ends with an `error` event; a raw audio stream is aborted (the connection closes
without the final chunk), so the client sees an incomplete transfer rather than a short file
that looks whole. Either way the failure is one log line, never a traceback: a failed cast,
or the store failing under the read (`store_unavailable`, in-band for SSE).
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

from speechd.audio import content_type, finished_bytes
from speechd.durable import DurableError
from speechd.errors import SpeechdError, StoreUnavailable
from speechd.metrics import ApiMetrics
from speechd.service import CastService, SubmittedCast

from ._errors import error_body, error_body_for, log_store_trouble
from ._streaming import AbortBody, AppResponse, StreamApp

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


async def _raw(chunks: Chunks) -> AsyncGenerator[bytes, None]:
    async with aclosing(chunks):
        try:
            async for chunk in chunks:
                yield chunk
        except SpeechdError as exc:
            # Ending without the terminating chunk: the client sees an incomplete body, not a
            # short file that looks whole.
            log.warning("a cast failed mid-stream, aborting the response: %s", exc)
            raise AbortBody(str(exc)) from exc
        except DurableError as exc:
            log_store_trouble("streaming a speech response (aborted)", exc)
            raise AbortBody(str(exc)) from exc


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
            log.warning("a cast failed mid-stream: %s", exc)
            yield _event({"type": "error", **error_body_for(exc)})
            return
        except DurableError as exc:
            log_store_trouble("streaming speech events", exc)
            yield _event({"type": "error", **error_body_for(StoreUnavailable())})
            return
        except Exception:
            log.exception("reading a cast failed mid-stream")
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
        body = finished_bytes(cast.recipe.format, body, offset=0, size=len(body))
        return Response(body, media_type=media_type, headers=headers)
    raw_headers = [(b"content-type", media_type.encode("latin-1"))] + [
        (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()
    ]
    return AppResponse(StreamApp(_raw(chunks), headers=raw_headers))
