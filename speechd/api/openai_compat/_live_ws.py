"""`/v1/audio/speech/live`: a live cast over one WebSocket, one message per piece.

    client: {"voice": "af_heart", "response_format": "mp3", "stream_format": "audio"}
    server: {"type": "cast", "id", "url", "input_url", "input_token"}
    client: {"type": "input.append", "text": "Hello the"}   server: {"type": "input.accepted", ...}
    client: {"type": "input.append", "text": "re. How are"}
    server: {"type": "speech.audio.caption", "index": 0, "text": "Hello there.", ...}
    server: <binary frame: the chunk's audio>   (or {"type": "speech.audio.delta", "audio"})
    client: {"type": "input.done"}
    server: ... {"type": "speech.audio.done", "usage": {...}}, then a normal close (1000)

The audio frames, in order, are one file of the requested format (the same bytes the cast's
`/audio` gives). A bad message gets an `error` message (OpenAI's error object) and the session
goes on; a bad first message, a missing API key (when the server has keys: send `Authorization:
Bearer <key>`) or a failed cast end it (close 1008, 1011). The usage or the cast's error is the
last message, even where a piece is answered as the cast ends. A session is a long-lived read:
it holds one of the client's stream slots (`speechd.api._slots.ClientSlots`) until it ends, and
past the caps it gets the 429 or 503 error message and close 1013 (try again later) before
anything is made. A store failure is an error message with code `store_unavailable` (one log
line): while the cast is made it ends the session (close 1011; the cast itself goes on), while
its input is written the session goes on (send the piece again with its `seq`). A socket that
drops does not end the cast: finish its input over HTTP with the token from the `cast` message,
and replay its audio by link. The session only awaits the store and the socket: nothing on the
event loop does more than decode a bounded message or base64 a chunk.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import math
from typing import Any, Final

import msgspec
from litestar import WebSocket, websocket
from litestar.di import NamedDependency

from speechd.casts.schema import AudioChunk
from speechd.config import Settings
from speechd.errors import AuthenticationFailed, InvalidRequest, SpeechdError, StoreUnavailable
from speechd.service import LiveCast, LiveCasts

from .._errors import error_body, error_body_for
from .._links import cast_url, input_url, public_base_url
from .._slots import ClientSlots
from ._live import create_live, key_ok
from ._live_wire import (
    MAX_WS_MESSAGE_BYTES,
    CaptionMessage,
    DeltaMessage,
    DoneMessage,
    ErrorMessage,
    InputAccepted,
    InputAppend,
    InputDone,
    LiveCastMessage,
    LiveStart,
    Usage,
)
from ._speech import OUTPUT_TOKENS_PER_SECOND

__all__ = ["speech_live"]

log = logging.getLogger("speechd.api")

FIRST_MESSAGE_S: Final = 30.0
"""How long a new socket may take to send its first message."""
_NORMAL, _GOING_AWAY, _POLICY, _SERVER_ERROR, _TRY_LATER = 1000, 1001, 1008, 1011, 1013

_encode = msgspec.json.Encoder().encode
_first = msgspec.json.Decoder(LiveStart)
_message = msgspec.json.Decoder(InputAppend | InputDone)


class _Gone(Exception):
    """The client went away."""


class _Session:
    def __init__(
        self,
        socket: WebSocket[Any, Any, Any],
        live: LiveCasts,
        slots: ClientSlots,
        base_url: str,
    ) -> None:
        self.socket = socket
        self.live = live
        self.slots = slots
        self.base_url = base_url
        self._send_lock = asyncio.Lock()
        self._ended = False
        self.binary = True

    # -- the socket ---------------------------------------------------------------------

    async def receive(self) -> str:
        """The next text message; raises `_Gone` when the client left, `InvalidRequest` for
        a binary or oversized message."""
        event = await self.socket.receive()
        if event["type"] == "websocket.disconnect":
            raise _Gone
        text = event.get("text")
        if text is None:
            raise InvalidRequest("Send JSON text messages, not binary ones.")
        if len(text) > MAX_WS_MESSAGE_BYTES:
            raise InvalidRequest(f"A message is at most {MAX_WS_MESSAGE_BYTES} bytes.")
        return str(text)

    async def send(self, message: msgspec.Struct | bytes, *, last: bool = False) -> None:
        """Send one message; `last` marks the session's final word (its usage or the cast's
        error), after which nothing more is sent: the input task may still be answering a
        piece it took in before the end, and that answer must not follow the end."""
        async with self._send_lock:
            if self._ended:
                return
            self._ended = last
            try:
                if isinstance(message, bytes):
                    await self.socket.send_bytes(message)
                else:
                    await self.socket.send_text(_encode(message).decode())
            except Exception as exc:  # the socket closed under us: whatever the server says
                raise _Gone from exc

    async def error(self, exc: SpeechdError, *, last: bool = False) -> None:
        await self.send(ErrorMessage(error=error_body_for(exc)["error"]), last=last)

    async def close(self, code: int, reason: str = "") -> None:
        async with self._send_lock:
            with contextlib.suppress(Exception):
                await self.socket.close(code, reason)

    # -- the session --------------------------------------------------------------------

    async def run(self) -> None:
        socket = self.socket
        authorization = socket.headers.get("authorization")
        if socket.app.state.api_keys and not key_ok(socket, authorization):
            await self.error(
                AuthenticationFailed(
                    "You didn't provide a valid API key. Send 'Authorization: Bearer <key>'."
                )
            )
            await self.close(_POLICY, "authentication")
            return
        try:
            self.slots.take(socket.scope)  # past the caps: 429/503 before anything is made
            cast = await self._start()
        except SpeechdError as exc:  # the store's failure too: a 503, try again later
            await self.error(exc)
            code = _TRY_LATER if exc.status in (429, 503) else _POLICY
            await self.close(code if exc.status < 500 or exc.status == 503 else _SERVER_ERROR)
            return
        await self.send(
            LiveCastMessage(
                id=cast.id,
                url=cast_url(self.base_url, cast.id),
                input_url=input_url(self.base_url, cast.id),
                input_token=cast.token,
            )
        )
        if cast.input.pieces:
            await self._accepted(cast.id, cast.input.pieces, cast.input.chars, False)
        await self._pump(cast)

    async def _start(self) -> LiveCast:
        try:
            raw = await asyncio.wait_for(self.receive(), FIRST_MESSAGE_S)
        except asyncio.TimeoutError:
            raise InvalidRequest(
                f"No first message within {FIRST_MESSAGE_S:g} s: send the voice and format."
            ) from None
        try:
            start = _first.decode(raw)
        except msgspec.DecodeError as exc:
            raise InvalidRequest(f"The first message is not a session start: {exc}.") from None
        self.binary = start.stream_format != "json"
        return await create_live(self.live, start.model, start.to_live_request())

    async def _pump(self, cast: LiveCast) -> None:
        input_task = asyncio.ensure_future(self._input(cast))
        audio_task = asyncio.ensure_future(self._audio(cast))
        closing = asyncio.ensure_future(self.live.closing.wait())
        tasks = (input_task, audio_task, closing)
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, _Gone):
                    await task
        finished = next(
            (t for t in (audio_task, input_task) if t.done() and not t.cancelled()), None
        )
        if finished is None:  # the server is shutting down
            await self._fail(error_body("The server is shutting down.", "server_error"))
            await self.close(_GOING_AWAY)
            return
        outcome = finished.exception()
        if isinstance(outcome, _Gone):
            return  # the cast goes on without this socket
        if outcome is not None:
            log.error("a live-cast session failed", exc_info=outcome)
            await self._fail(error_body("The server had an error in this session.", "server_error"))
            await self.close(_SERVER_ERROR)
            return
        await self.close(finished.result())

    async def _fail(self, body: dict[str, Any]) -> None:
        with contextlib.suppress(_Gone):
            await self.send(ErrorMessage(error=body["error"]))

    async def _accepted(self, cast_id: str, seq: int, chars: int, done: bool) -> None:
        await self.send(InputAccepted(id=cast_id, seq=seq, chars=chars, done=done))

    async def _input(self, cast: LiveCast) -> int:
        """Append each piece as it comes; returns only when the client leaves (`_Gone`)."""
        while True:
            try:
                raw = await self.receive()
                try:
                    message = _message.decode(raw)
                except msgspec.DecodeError as exc:
                    raise InvalidRequest(
                        f"Not an input.append or input.done message: {exc}."
                    ) from None
                done = isinstance(message, InputDone)
                state = await self.live.append(
                    cast.id, message.text, done=done, seq=message.seq, token=cast.token
                )
            except SpeechdError as exc:
                # The session goes on: the next message may be fine. After the store failed
                # the piece may or may not be in: `seq` tells.
                await self.error(exc)
                continue
            await self._accepted(cast.id, state.pieces, state.chars, state.closed)

    async def _audio(self, cast: LiveCast) -> int:
        """Send each chunk's caption and audio as the worker appends it, then the usage."""
        audio_ms = 0
        try:
            async for event in self.live.events(cast.id):
                if not isinstance(event, AudioChunk):
                    audio_ms = event.audio_ms
                    break
                if event.text:
                    await self.send(
                        CaptionMessage(
                            index=event.index,
                            text=event.text,
                            offset_ms=event.offset_ms,
                            duration_ms=event.duration_ms,
                        )
                    )
                if not event.body:
                    continue
                if self.binary:
                    await self.send(event.body)
                else:
                    await self.send(DeltaMessage(audio=base64.b64encode(event.body).decode()))
            chars = (await self.live.input_state(cast.id)).chars
        except SpeechdError as exc:
            if not isinstance(exc, StoreUnavailable):  # the service logged the store's failure
                log.warning("a live cast failed (%s)", type(exc).__name__)
            await self.error(exc, last=True)
            return _SERVER_ERROR
        output = math.ceil(audio_ms * OUTPUT_TOKENS_PER_SECOND / 1000)
        await self.send(DoneMessage(usage=Usage(chars, output, chars + output)), last=True)
        return _NORMAL


@websocket("/audio/speech/live")
async def speech_live(
    socket: WebSocket[Any, Any, Any],
    live_casts: NamedDependency[LiveCasts],
    settings: NamedDependency[Settings],
    slots: NamedDependency[ClientSlots],
) -> None:
    """A live cast over one WebSocket (see this module's docstring)."""
    await socket.accept()
    await _Session(socket, live_casts, slots, public_base_url(settings, socket)).run()
