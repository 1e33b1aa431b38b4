"""A cast's audio as Wyoming events: `audio-start`, `audio-chunk`..., `audio-stop`.

`play` reads the cast's playable sequence (`CastReader.chunks`, the cast service's reader
every door uses: a new attempt after a worker died goes on from the audio already sent,
nothing lost or doubled) and sends each record as it lands, cut into `AUDIO_CHUNK_SAMPLES`
pieces of 24 kHz s16 mono PCM. `audio-start` goes out with the first audio (a cast that fails
before any is one `error` event) and names the cast (`cast_id`, and `cast_url` when the server
knows its public address). A failure after audio started is an `error` event, then the
`audio-stop` that closes the audio.

Every read races the workers' health (`speechd.service.Watch`: nobody waits on workers that
are not coming) and the server's shutdown; the client's pace is `Sender`'s concern.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any, Protocol

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.event import Event

from speechd.audio import SAMPLE_RATE
from speechd.casts.schema import AudioChunk as CastChunk
from speechd.errors import SpeechdError, StoreUnavailable, Unavailable
from speechd.service import CastService, Watch

from ._bounds import AUDIO_CHUNK_SAMPLES

__all__ = ["WIDTH", "Sender", "play"]

log = logging.getLogger("speechd.wyoming")

WIDTH = 2  # bytes per sample: s16
_PIECE = AUDIO_CHUNK_SAMPLES * WIDTH


class Sender(Protocol):
    """Where `play` sends its events (the connection)."""

    async def send(self, event: Event) -> None: ...

    async def error(self, exc: SpeechdError) -> None: ...


async def _next(chunks: AsyncGenerator[CastChunk, None]) -> CastChunk | None:
    try:
        return await anext(chunks)
    except StopAsyncIteration:
        return None


def _ms(samples: int) -> int:
    return samples * 1000 // SAMPLE_RATE


async def play(
    service: CastService,
    cast_id: str,
    out: Sender,
    *,
    closing: asyncio.Event,
    hold: bool = False,
    named: dict[str, Any] | None = None,
) -> None:
    """Send the cast's audio to `out` as it is made, then `audio-stop`; a failure is an
    `error` event (see the module docstring). `hold`: honour the cast's start hold (as
    `start: smooth` does on HTTP). `named`: fields added to `audio-start` (the cast's id
    and link). Raises only what `out` raises (the client went away)."""
    shutdown = Unavailable(
        "The server is shutting down; the cast goes on, and its link replays it."
    )
    watch = Watch(service, {closing.wait(): shutdown})
    chunks = service.reader.chunks(cast_id)
    started = False
    samples = 0
    try:
        async with aclosing(chunks):
            while (chunk := await watch.wait(_next(chunks))) is not None:
                if not started:
                    if hold:
                        status = await watch.wait(service.status(cast_id))
                        if status.plays_in_ms:
                            await watch.wait(asyncio.sleep(status.plays_in_ms / 1000))
                    start = AudioStart(rate=SAMPLE_RATE, width=WIDTH, channels=1, timestamp=0)
                    event = start.event()
                    event.data.update(named or {})
                    await out.send(event)
                    started = True
                body = chunk.body[: len(chunk.body) - len(chunk.body) % WIDTH]
                for at in range(0, len(body), _PIECE):
                    piece = body[at : at + _PIECE]
                    await out.send(
                        AudioChunk(
                            rate=SAMPLE_RATE,
                            width=WIDTH,
                            channels=1,
                            audio=piece,
                            timestamp=_ms(samples),
                        ).event()
                    )
                    samples += len(piece) // WIDTH
        if not started:  # a cast with no audio at all (nothing speakable in its text)
            await out.send(AudioStart(rate=SAMPLE_RATE, width=WIDTH, channels=1).event())
        await out.send(AudioStop(timestamp=_ms(samples)).event())
    except SpeechdError as exc:
        if not isinstance(exc, StoreUnavailable):  # the service logged the store's failure
            log.warning("a Wyoming synthesis failed (%s)", type(exc).__name__)
        await _failed(out, exc, started, samples)
    finally:
        watch.close()


async def _failed(out: Sender, exc: SpeechdError, started: bool, samples: int) -> None:
    await out.error(exc)
    if started:
        await out.send(AudioStop(timestamp=_ms(samples)).event())
