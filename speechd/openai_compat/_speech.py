"""The three ways `POST /v1/audio/speech` answers with a cast's audio.

All three read the same cast with `CastService.audio`, the same bytes any identical request
reads; a client that goes away stops only its own reading, never the cast.

* `audio` (default): the bytes as the worker appends them, chunked, one valid file.
* `stream: false`: waits for `eos`, then the whole file with `Content-Length`.
* `sse`: `speech.audio.delta` events (base64 audio), then `speech.audio.done` with usage;
  with `words`, each delta is followed by a `speech.audio.words` event holding the words of
  that audio, `{"word", "start", "end"}` in seconds from the start of the cast's audio.

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
from typing import Any, Literal, TypeVar

import msgspec
from litestar import Response
from litestar.response import Stream

from speechd.audio import content_type
from speechd.casts import AudioChunk, playable_chunks
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
#: Audio with the words it holds (cast-level seconds), for SSE with word timestamps.
Timed = AsyncGenerator[tuple[bytes, list[dict[str, Any]]], None]
T = TypeVar("T")


async def _timed(chunks: AsyncGenerator[AudioChunk, None]) -> Timed:
    """Each playable record's audio and words, the words placed in the cast's audio by the
    durations of the records before them."""
    at = 0
    async with aclosing(chunks):
        async for chunk in chunks:
            words = [
                {"word": w.text, "start": (at + w.start_ms) / 1000, "end": (at + w.end_ms) / 1000}
                for w in chunk.words
            ]
            at += chunk.duration_ms
            if chunk.body or words:
                yield chunk.body, words


async def _first_audio_then_rest(
    chunks: AsyncGenerator[T, None], started: float, metrics: ApiMetrics
) -> AsyncGenerator[T, None]:
    """Wait for the first chunk (or the cast's failure) now; return a generator of them all."""
    try:
        first: T | None = await anext(chunks)
    except StopAsyncIteration:
        first = None
    except BaseException:
        await chunks.aclose()
        raise
    if first is not None:
        metrics.first_audio(time.monotonic() - started)

    async def replay() -> AsyncGenerator[T, None]:
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


async def _sse(
    service: CastService, cast: SubmittedCast, chunks: Chunks | Timed
) -> AsyncIterator[bytes]:
    async with aclosing(chunks):
        try:
            async for chunk in chunks:
                data, words = chunk if isinstance(chunk, tuple) else (chunk, None)
                if data:
                    audio = base64.b64encode(data).decode()
                    yield _event({"type": "speech.audio.delta", "audio": audio})
                if words:
                    yield _event({"type": "speech.audio.words", "words": words})
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
    words: bool = False,
) -> Response[Any]:
    """The response for `cast` in `mode` (SSE: with word events if `words`); raises (before
    any byte) if the cast failed early."""
    if mode == "sse":
        source: Chunks | Timed = (
            _timed(playable_chunks(service.store, cast.id)) if words else service.audio(cast.id)
        )
        events = await _first_audio_then_rest(source, started, metrics)
        sse_headers = {**headers, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return Stream(
            _sse(service, cast, events), media_type="text/event-stream", headers=sse_headers
        )
    chunks = await _first_audio_then_rest(service.audio(cast.id), started, metrics)
    media_type = content_type(cast.recipe.format)
    if mode == "whole":
        async with aclosing(chunks):
            body = b"".join([chunk async for chunk in chunks])
        return Response(body, media_type=media_type, headers=headers)
    return Stream(_raw(cast.id, chunks), media_type=media_type, headers=headers)
