"""The Wyoming server: Home Assistant's door into speechd, beside the HTTP api.

    door = WyomingDoor("tcp://0.0.0.0:10200", service=service, live=live, slots=slots, ...)
    await door.start()          # listening (and advertised, with `zeroconf`)
    ...
    await door.close()          # stops listening, ends its connections, withdraws the advert

It is a client of the casts layer like the api: it submits casts through the `CastService`,
makes live casts through `LiveCasts` and reads the playable sequence; it never loads the
model. The `wyoming` package serves the sockets (`AsyncServer.from_uri`: `tcp://` or
`unix://`) and decodes the events; each connection is a `Connection`. Its connections hold
slots of the `StreamSlots` it is given: under `speechd serve` the api's own, so the api's
stream caps count Wyoming connections too.

`wyoming_door(settings, ...)` builds one from the settings (its services over the store they
name), as `speechd serve` and `speechd wyoming` do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal
from urllib.parse import urlparse

from wyoming.server import AsyncServer

from speechd.config import Settings
from speechd.limits import StreamSlots
from speechd.service import CastService, LiveCasts, cast_url, open_services

from ._bounds import IDLE_S, SEND_TIMEOUT_S
from ._session import Connection
from ._zeroconf import Advertisement

__all__ = ["WyomingDoor", "stream_slots", "wyoming_door"]

log = logging.getLogger("speechd.wyoming")

_CLOSE_S = 5.0  # how long open connections get to end when the server stops


class WyomingDoor:
    """One Wyoming server over one cast service."""

    def __init__(
        self,
        uri: str,
        *,
        service: CastService,
        live: LiveCasts,
        slots: StreamSlots,
        default_voice: str,
        voice_map: Mapping[str, str],
        start: Literal["smooth", "now"] = "smooth",
        public_url: str | None = None,
        zeroconf: str | None = None,
        idle_s: float = IDLE_S,
        send_timeout_s: float = SEND_TIMEOUT_S,
    ) -> None:
        self.uri = uri
        self.service = service
        self.live = live
        self.slots = slots
        self.default_voice = default_voice
        self.voice_map = dict(voice_map)
        self.start_mode = start
        """As the api's `--start`: `smooth` holds a one-shot synthesis's first audio for as
        long as its cast states it must to play through; `now` sends it at once."""
        self.public_url = public_url.rstrip("/") if public_url else None
        self.idle_s = idle_s
        """How long a connection may wait between the events it sends."""
        self.send_timeout_s = send_timeout_s
        """How long an event may wait for its client to read it before the client is dropped."""
        self.closing = asyncio.Event()
        """Set when the server stops: connections end, their casts go on."""
        self._zeroconf = zeroconf
        self._advert: Advertisement | None = None
        self._server: AsyncServer | None = None
        self.connections: set[asyncio.Task[Any]] = set()
        """The tasks serving open connections (each adds and removes its own)."""

    def cast_fields(self, cast_id: str) -> dict[str, str]:
        """What `audio-start` says of its cast: its id, and its player's link when the server
        knows its public address (`--public-url`)."""
        fields = {"cast_id": cast_id}
        if self.public_url:
            fields["cast_url"] = cast_url(self.public_url, cast_id)
        return fields

    async def start(self) -> None:
        """Listen (and advertise, when asked); raises OSError when the address is taken."""
        server = AsyncServer.from_uri(self.uri)
        await server.start(self._connection)
        self._server = server
        if self._zeroconf is not None:
            parsed = urlparse(self.uri)
            if parsed.scheme != "tcp":
                log.warning("zeroconf advertises tcp:// servers only; %s is not", self.uri)
            else:
                try:
                    advert = Advertisement(self._zeroconf, parsed.hostname or "", parsed.port or 0)
                    await advert.start()
                except (OSError, ValueError) as exc:  # serving goes on, undiscovered
                    log.warning("cannot advertise %s over zeroconf: %s", self.uri, exc)
                else:
                    self._advert = advert
        log.info("speechd Wyoming server on %s", self.uri)

    def _connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> Connection:
        return Connection(reader, writer, self)

    async def close(self) -> None:
        """Stop listening, end the connections (their casts go on), withdraw the advert."""
        self.closing.set()
        if self._advert is not None:
            advert, self._advert = self._advert, None
            with contextlib.suppress(Exception):
                await advert.close()
        server, self._server = self._server, None
        if server is not None:
            await server.stop()
        pending = set(self.connections)
        if pending:
            _, late = await asyncio.wait(pending, timeout=_CLOSE_S)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=_CLOSE_S)


@contextlib.asynccontextmanager
async def wyoming_door(
    settings: Settings, *, slots: StreamSlots | None = None
) -> AsyncIterator[WyomingDoor]:
    """A started door for `settings` (which must name `wyoming_uri`), over the store they name,
    closed on exit. `slots`: the api's stream slots, to share its caps (else its own, from the
    same settings)."""
    if settings.wyoming_uri is None:
        raise ValueError("no Wyoming URI is set")
    if settings.api_keys:
        log.warning(
            "the Wyoming server has no authentication: whoever reaches %s can synthesize",
            settings.wyoming_uri,
        )
    async with contextlib.AsyncExitStack() as stack:
        service, live = await stack.enter_async_context(open_services(settings))
        engine = settings.engine_config()
        door = WyomingDoor(
            settings.wyoming_uri,
            service=service,
            live=live,
            slots=slots or stream_slots(settings),
            default_voice=engine.default_voice,
            voice_map=engine.voice_map,
            start=settings.start,
            public_url=settings.public_url,
            zeroconf=settings.wyoming_zeroconf,
        )
        await door.start()
        stack.push_async_callback(door.close)
        yield door


def stream_slots(settings: Settings) -> StreamSlots:
    """Stream slots with the api's caps from `settings` (`--max-streams`,
    `--max-client-streams`), for a door that runs without the api."""
    return settings.stream_slots()
