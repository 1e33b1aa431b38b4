"""One Wyoming connection: the events a speech client sends, and what each one does.

    describe                                  -> info
    synthesize {text, voice?}                 -> audio-start, audio-chunk..., audio-stop
    synthesize-start {voice?}                    (a live cast; its audio streams as it is made)
      synthesize-chunk {text}...              -> audio-start, audio-chunk...
      synthesize {text}                          (Home Assistant's copy of the whole text: ignored)
    synthesize-stop                           -> ...audio-stop, synthesize-stopped
    ping                                      -> pong

A `synthesize` is a cast like `POST /v1/audio/speech` with `response_format: pcm` (the same
cast id, so identical requests share one cast), checked by the same `CastService.submit`. A
streamed synthesis is a live cast (`LiveCasts`): each chunk is appended to its input and the
worker speaks from the first clause on. Anything refused (an unknown voice, a bad or too long
text, a full queue, no worker) is an `error` event, and the connection takes the next request;
only a malformed event (one whose framing cannot be trusted) ends it, after its `error`.

The connection holds one of the api's stream slots while it is open (past the caps it gets
the 429/503 error and is closed before anything is read), waits at most `IDLE_S` for each
event (`AFTER_ERROR_IDLE_S` after a refusal), and drops a client that does not read an event
within `SEND_TIMEOUT_S`. When the server stops it takes no new request: it ends the reply
under way (`WyomingDoor.close` says how long it may take), then closes. A connection that
ends mid-stream, however it ends, closes its live cast's input: the cast speaks the text
that came, to its end, and its link replays it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from wyoming.error import Error
from wyoming.event import Event, async_read_event, async_write_event
from wyoming.info import Describe
from wyoming.ping import Ping, Pong
from wyoming.server import AsyncEventHandler
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeStopped,
)

from speechd.errors import InputClosed, InvalidRequest, SpeechdError
from speechd.limits import MAX_CLIENT_KEY_CHARS
from speechd.service import LiveCast

from . import _wire
from ._audio import play
from ._bounds import AFTER_ERROR_IDLE_S, MAX_SYNTHESIZE_CHARS
from ._info import describe, language_tag
from ._reader import BoundedReader

if TYPE_CHECKING:
    from ._door import WyomingDoor

__all__ = ["Connection"]

log = logging.getLogger("speechd.wyoming")

# What the reference decoder lets through from a header it could parse but not use.
_MALFORMED = (ValueError, TypeError, KeyError, AttributeError, IndexError, RecursionError)


class _Gone(Exception):
    """The client went away, or was dropped for not reading."""


class _Stopped(Exception):
    """The server stopped while the connection waited for an event."""


class _Stream:
    """A streamed synthesis: its live cast (None when its start was refused) and the task
    that sends its audio."""

    def __init__(self, cast: LiveCast | None = None, audio: asyncio.Task[None] | None = None):
        self.cast = cast
        self.audio = audio


class Connection(AsyncEventHandler):
    """One client's connection (the `wyoming` server makes one per accepted socket)."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, door: WyomingDoor
    ) -> None:
        super().__init__(reader, writer)
        self._events = BoundedReader(reader)
        self._door = door
        self._send_lock = asyncio.Lock()
        self._stream: _Stream | None = None
        self._refused = False  # the last event was answered with an error

    # -- the socket ---------------------------------------------------------------------

    def _client(self) -> str:
        """The key the stream caps count this client by: its address, written as the api
        writes a peer's, so one client's HTTP reads and Wyoming connections count together
        (a unix socket's clients are one: `local`)."""
        peer = self.writer.get_extra_info("peername")
        host = peer[0] if isinstance(peer, tuple) and peer else None
        if not isinstance(host, str):
            return "local"
        try:
            return str(ipaddress.ip_address(host))
        except ValueError:
            return host[:MAX_CLIENT_KEY_CHARS]

    async def send(self, event: Event) -> None:
        """Write `event`; raises `_Gone` when the client has left or does not read it within
        `SEND_TIMEOUT_S` (then the connection is cut, its unsent bytes dropped)."""
        async with self._send_lock:
            if self.writer.is_closing():
                raise _Gone
            try:
                await asyncio.wait_for(
                    async_write_event(event, self.writer), self._door.send_timeout_s
                )
            except asyncio.TimeoutError:
                log.info("dropped a Wyoming client that stopped reading")
                self.writer.transport.abort()
                raise _Gone from None
            except (ConnectionError, OSError) as exc:
                raise _Gone from exc

    async def write_event(self, event: Event) -> None:
        await self.send(event)

    async def error(self, exc: SpeechdError) -> None:
        """Send `exc` as an `error` event: its message, and its code (or its type)."""
        self._refused = True
        await self.send(Error(text=exc.message, code=exc.code or exc.type).event())

    # -- the connection -----------------------------------------------------------------

    async def run(self) -> None:
        """Serve events until the client leaves, idles, sends a malformed event or the
        server stops; the slot and any open live input are given back however it ends."""
        task = asyncio.current_task()
        assert task is not None
        self._door.connections.add(task)
        try:
            try:
                slot = self._door.slots.acquire(self._client())
            except SpeechdError as exc:  # past the caps: refused before anything is read
                with contextlib.suppress(_Gone):
                    await self.error(exc)
                return
            try:
                await self._serve()
            except _Gone:
                pass
            except Exception:  # a bug ends this connection, with one line, never the server
                log.exception("a Wyoming connection failed")
                with contextlib.suppress(_Gone):
                    await self.error(SpeechdError("The server had an error on this connection."))
            finally:
                slot.release()
                await self._end_stream()
        finally:
            self.writer.close()
            self._door.connections.discard(task)

    async def _serve(self) -> None:
        while not self._door.stopping.is_set() or self._stream is not None:
            try:
                event = await self._next_event()
            except _Stopped:
                return
            except asyncio.TimeoutError:
                return
            except (asyncio.IncompleteReadError, ConnectionError, OSError):
                return  # it left mid-event
            except _MALFORMED:
                await self.error(InvalidRequest("A malformed event: its header is not an event."))
                return
            if event is None:
                if self._events.refused is not None or not self._events.at_eof():
                    reason = self._events.refused or "A malformed event: not one JSON header line."
                    await self.error(InvalidRequest(reason))
                return
            if not isinstance(event.type, str) or not isinstance(event.data, dict):
                await self.error(InvalidRequest("An event needs a string type and object data."))
                continue
            await self.handle_event(event)

    async def _next_event(self) -> Event | None:
        """The next event, as `async_read_event` reads it within the idle timeout; raises
        `_Stopped` when the server stops first: at once between requests, and inside a
        streamed synthesis (a reply under way) once its replies are cut."""
        reading = asyncio.ensure_future(
            asyncio.wait_for(async_read_event(self._events), self._idle_s())  # type: ignore[arg-type]
        )
        stop = self._door.closing if self._stream is not None else self._door.stopping
        stopped = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({reading, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            if not reading.done():
                reading.cancel()
                await asyncio.wait({reading})
        if reading.cancelled():
            raise _Stopped
        return reading.result()

    def _idle_s(self) -> float:
        """How long to wait for the next event: `idle_s`, but after a refusal only
        `AFTER_ERROR_IDLE_S`. A client that goes on sends its next request at once; one that
        reads on for audio that will not come (Home Assistant waits for `audio-stop` or the
        socket to close) learns of the failure in seconds, not at the idle timeout."""
        refused, self._refused = self._refused, False
        return min(self._door.idle_s, AFTER_ERROR_IDLE_S) if refused else self._door.idle_s

    async def handle_event(self, event: Event) -> bool:
        kind = event.type
        handler: Callable[[dict[str, Any]], Awaitable[None]] | None = None
        if Describe.is_type(kind):
            handler = self._describe
        elif Synthesize.is_type(kind):
            handler = self._synthesize
        elif SynthesizeStart.is_type(kind):
            handler = self._start_stream
        elif SynthesizeChunk.is_type(kind):
            handler = self._chunk
        elif SynthesizeStop.is_type(kind):
            handler = self._stop_stream
        elif Ping.is_type(kind):
            text = event.data.get("text")
            await self.send(Pong(text=text if isinstance(text, str) else None).event())
        if handler is None:
            return True  # as Wyoming servers do: an event it does not serve is dropped
        try:
            await handler(event.data)
        except SpeechdError as exc:  # the store's failure too (the service logged it)
            await self.error(exc)
        return True

    # -- the events ---------------------------------------------------------------------

    async def _describe(self, data: dict[str, Any]) -> None:
        door = self._door
        info = await describe(
            door.service, voice_map=door.voice_map, default_voice=door.default_voice
        )
        await self.send(info.event())

    async def _synthesize(self, data: dict[str, Any]) -> None:
        if self._stream is not None:
            return  # sent inside a stream for clients that cannot stream: the chunks rule
        request = _wire.decode(data, _wire.Synthesize, "synthesize")
        door = self._door
        cast = await door.service.submit(
            request.to_cast_request(
                await self._voice(request.voice), at_once=door.start_mode == "now"
            ),
            max_chars=MAX_SYNTHESIZE_CHARS,
            text_param="text",
        )
        await play(
            door.service,
            cast.id,
            self,
            closing=door.closing,
            hold=door.start_mode == "smooth",
            named=door.cast_fields(cast.id),
        )

    async def _start_stream(self, data: dict[str, Any]) -> None:
        if self._stream is not None:
            raise InvalidRequest("A stream is open already: send synthesize-stop first.")
        self._stream = _Stream()  # refused below: its chunks are dropped, its stop answered
        request = _wire.decode(data, _wire.Start, "synthesize-start")
        door = self._door
        cast = await door.live.create(request.to_live_request(await self._voice(request.voice)))
        audio = asyncio.ensure_future(
            play(
                door.service,
                cast.id,
                self,
                closing=door.closing,
                named=door.cast_fields(cast.id),
            )
        )
        self._stream = _Stream(cast, audio)

    async def _chunk(self, data: dict[str, Any]) -> None:
        stream = self._stream
        if stream is None:
            raise InvalidRequest("A synthesize-chunk outside a stream: send synthesize-start.")
        if stream.cast is None:
            return  # its start was refused, and said so
        text = _wire.decode(data, _wire.Chunk, "synthesize-chunk").text
        if text:
            await self._door.live.append(stream.cast.id, text, done=False, token=stream.cast.token)

    async def _stop_stream(self, data: dict[str, Any]) -> None:
        stream, self._stream = self._stream, None
        if stream is None:
            raise InvalidRequest("A synthesize-stop outside a stream: send synthesize-start.")
        if stream.cast is not None and stream.audio is not None:
            await self._close_input(stream.cast)
            await stream.audio  # to its audio-stop (or its error)
        await self.send(SynthesizeStopped().event())

    async def _close_input(self, cast: LiveCast) -> None:
        with contextlib.suppress(InputClosed):  # idle past its timeout: closed already
            await self._door.live.append(cast.id, "", done=True, token=cast.token)

    async def _end_stream(self) -> None:
        """The connection ends: a stream still open keeps its cast, which speaks what came."""
        stream, self._stream = self._stream, None
        if stream is None or stream.cast is None or stream.audio is None:
            return
        if not self._door.closing.is_set():
            stream.audio.cancel()  # else it is sending its `error` and `audio-stop`
        try:
            await stream.audio
        except (asyncio.CancelledError, _Gone):
            pass
        except Exception:  # the input must still be closed
            log.exception("a Wyoming stream's audio failed")
        try:
            await self._close_input(stream.cast)
        except SpeechdError as exc:  # its idle timeout closes it instead
            log.warning("could not close a dropped stream's input (%s)", type(exc).__name__)

    # -- request fields -----------------------------------------------------------------

    async def _voice(self, voice: _wire.Voice | None) -> str | None:
        """The voice name to resolve: the one asked for, else one for the language asked
        for (the default voice when it speaks it), else None (the default voice)."""
        if voice is None or voice.name:
            return voice.name if voice else None
        if not voice.language:
            return None
        wanted = voice.language.replace("_", "-").lower()
        installed = await self._door.service.voices()
        default = self._door.default_voice
        speaking = [v for v in installed if _speaks(language_tag(v).lower(), wanted)]
        if not speaking:
            raise InvalidRequest(f"No voice here speaks {voice.language!r}.", param="voice")
        return default if default in speaking else speaking[0]


def _speaks(tag: str, wanted: str) -> bool:
    """Whether a voice tagged `tag` speaks `wanted` (`en` takes `en-US`, `es-MX` takes `es`)."""
    return tag == wanted or tag.startswith(wanted + "-") or wanted.startswith(tag + "-")
