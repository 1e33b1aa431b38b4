"""The three ways `POST /v1/audio/speech` answers with a cast's audio.

All three read the same cast through the service's reader (`CastService.reader`: `audio`, or
`chunks` with their words), the same bytes any identical request reads; a client that goes
away stops only its own reading, never the cast.

* `audio` (default): the bytes as the worker appends them, chunked, one valid file.
* `stream: false`: waits for `eos` (reading none of the audio meanwhile), then the whole
  file with its `Content-Length`, streamed from the store a few records at a time
  (`CastReader.finished_file`, `file_bytes`: a wav says its true sizes in its header), so a
  slow reader holds about one record in memory, never the file.
* `sse`: `speech.audio.delta` events (base64 audio), then `speech.audio.done` with usage;
  with `words`, each delta is followed by a `speech.audio.words` event holding the words of
  that audio, `{"word", "start", "end"}` in seconds from the start of the cast's audio.

The first chunk is awaited before the response starts, so a cast that fails before any audio
is an ordinary error response with its status. A failure after that cannot change the status:
an SSE stream ends with an `error` event; a raw audio stream is aborted (the connection closes
without the final chunk), so the client sees an incomplete transfer rather than a short file
that looks whole. Either way the failure is one log line, never a traceback: a failed cast,
or the store failing under the read (`store_unavailable`, in-band for SSE).

**The start hold.** A cast that cannot be made in real time states, with its first audio, how
long its listeners must wait to hear the rest without a stall (`CastStatus.plays_in_ms`).
With `start="smooth"` (the default) a streamed response (audio or SSE) holds its bytes back
that long and says so in `X-Cast-Start-Delay` (seconds, sent with the headers); with
`start="now"` it sends the first audio at once (the header says 0) and its listener may stall.
On a device that keeps up there is no hold. A whole-file response (`stream: false`) waits for
the whole cast anyway.

Nobody waits in vain (`speechd.service.Watch`): every read of the cast races the workers' health
(`CastService.watch_workers`): when the model is known not to load, or no worker has been ready
for `UNREADY_GRACE_S`, the caller gets that 503 (or, once audio went out, the in-band failure
above). Until the response starts, it also races the client: one that disconnects while it
waits for the first audio (or, with `stream: false`, for the whole file) stops its reading at
once and is answered 499 into the void; once the response streams, Litestar notices a
disconnect itself.
"""

from __future__ import annotations

import asyncio
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
from litestar.types import Receive

from speechd.audio import content_type
from speechd.casts.schema import AudioChunk, Word
from speechd.errors import SpeechdError, StoreUnavailable
from speechd.service import CastService, SubmittedCast, Watch

from .._errors import error_body, error_body_for
from .._streaming import AppResponse, StreamApp, aborting
from ..metrics import ApiMetrics

__all__ = ["OUTPUT_TOKENS_PER_SECOND", "START_DELAY_HEADER", "Mode", "Start", "speech_response"]

log = logging.getLogger("speechd.api")

Mode = Literal["audio", "whole", "sse"]
Start = Literal["smooth", "now"]

START_DELAY_HEADER = "X-Cast-Start-Delay"
"""Seconds from a streamed speech response's headers until its audio starts: the start hold a
cast slower than real time needs to play through (0: at once)."""

OUTPUT_TOKENS_PER_SECOND = 50
"""`usage.output_tokens` counts one token per 20 ms of audio (speechd has no audio tokenizer);
`usage.input_tokens` counts the input's characters."""

_json = msgspec.json.Encoder()

CLIENT_GONE = 499
"""The status logged for a caller that disconnected before its response started (nginx's)."""

T = TypeVar("T")
Chunks = AsyncGenerator[bytes, None]
#: Audio with the words it holds (cast-level seconds), for SSE with word timestamps.
Timed = AsyncGenerator[tuple[bytes, list[dict[str, Any]]], None]


class _ClientGone(Exception):
    """The caller disconnected while it waited."""


async def _disconnect(receive: Receive) -> None:
    """Return once the client has gone (the request body was read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _timed(chunks: AsyncGenerator[AudioChunk, None]) -> Timed:
    """Each playable record's audio and words, the words placed in the cast's audio by the
    durations of the records before them."""
    at = 0
    async with aclosing(chunks):
        async for chunk in chunks:
            words = [_word(w, at) for w in chunk.words]
            at += chunk.duration_ms
            if chunk.body or words:
                yield chunk.body, words


def _word(word: Word, at: int) -> dict[str, object]:
    """A `speech.audio.words` entry: seconds in the cast's audio, and where the word is in
    the input as sent (`source`, when known); a mark has `mark` and no word."""
    out: dict[str, object] = {
        "word": word.text,
        "start": (at + word.start_ms) / 1000,
        "end": (at + word.end_ms) / 1000,
    }
    if word.source is not None:
        out["source"] = list(word.source)
    if word.mark:
        out["mark"] = word.mark
    return out


async def _next(chunks: AsyncGenerator[T, None]) -> T | None:
    try:
        return await anext(chunks)
    except StopAsyncIteration:
        return None


async def _rest(
    service: CastService, first: T | None, chunks: AsyncGenerator[T, None], hold_s: float = 0.0
) -> AsyncGenerator[T, None]:
    """The first chunk (already read), `hold_s` later, then the others as they come, each
    read watched.

    Its vigil lives only while the response iterates it (one never started leaves nothing
    running behind)."""
    async with aclosing(chunks):
        if first is None:
            return
        if hold_s > 0:
            await asyncio.sleep(hold_s)
        yield first
        vigil = Watch(service)
        try:
            while (chunk := await vigil.wait(_next(chunks))) is not None:
                yield chunk
        finally:
            vigil.close()


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
            if not isinstance(exc, StoreUnavailable):  # the service logged the store's failure
                log.warning("a cast failed mid-stream: %s", exc)
            yield _event({"type": "error", **error_body_for(exc)})
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


async def _whole(
    service: CastService,
    metrics: ApiMetrics,
    cast: SubmittedCast,
    vigil: Watch,
    *,
    started: float,
    headers: dict[str, str],
) -> Response[Any]:
    """The finished file, once the cast has ended, with its size up front; read from the
    store as it is sent."""
    await vigil.wait(service.reader.ended(cast.id))
    file = await vigil.wait(service.reader.finished_file(cast.id))
    metrics.first_audio(time.monotonic() - started)
    media_type = content_type(cast.recipe.format)
    raw_headers = [
        (b"content-type", media_type.encode("latin-1")),
        (b"content-length", str(file.size).encode("latin-1")),
    ] + [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    body = aborting(service.reader.file_bytes(cast.id, file, 0, file.size))
    return AppResponse(StreamApp(body, headers=raw_headers))


async def speech_response(
    service: CastService,
    metrics: ApiMetrics,
    cast: SubmittedCast,
    *,
    mode: Mode,
    started: float,
    headers: dict[str, str],
    receive: Receive | None = None,
    words: bool = False,
    start: Start = "smooth",
) -> Response[Any]:
    """The response for `cast` in `mode` (SSE: with word events if `words`); raises (before
    any byte) if the cast failed early or no worker is coming. `receive`: the request's, to
    notice a client that leaves while it waits (499). `start`: see the start hold above."""
    vigil = Watch(service, {_disconnect(receive): _ClientGone()})
    if mode == "whole":
        try:
            return await _whole(service, metrics, cast, vigil, started=started, headers=headers)
        except _ClientGone:
            log.info("a caller left before its speech response started")
            return Response(b"", status_code=CLIENT_GONE)
        finally:
            vigil.close()
    chunks: Chunks | Timed = (
        _timed(service.reader.chunks(cast.id))
        if words and mode == "sse"
        else service.reader.audio(cast.id)
    )
    try:
        first: Any = await vigil.wait(_next(chunks))
        if first is not None:
            metrics.first_audio(time.monotonic() - started)
        hold_s = 0.0
        if first is not None and start == "smooth":
            status = await vigil.wait(service.status(cast.id))
            hold_s = (status.plays_in_ms or 0) / 1000
    except _ClientGone:
        log.info("a caller left before its speech response started")
        await chunks.aclose()
        vigil.close()
        return Response(b"", status_code=CLIENT_GONE)
    except BaseException:
        await chunks.aclose()
        vigil.close()
        raise
    vigil.close()  # the response watches on its own (and Litestar notices a disconnect)
    headers = {**headers, START_DELAY_HEADER: f"{hold_s:.1f}"}
    rest = _rest(service, first, chunks, hold_s)
    if mode == "sse":
        sse_headers = {**headers, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return Stream(
            _sse(service, cast, rest), media_type="text/event-stream", headers=sse_headers
        )
    media_type = content_type(cast.recipe.format)
    raw_headers = [(b"content-type", media_type.encode("latin-1"))] + [
        (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()
    ]
    body = aborting(rest)  # type: ignore[arg-type]
    return AppResponse(StreamApp(body, headers=raw_headers))
