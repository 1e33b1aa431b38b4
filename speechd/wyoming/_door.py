"""The Wyoming server: Home Assistant's door into speechd, beside the HTTP api.

    door = WyomingDoor("tcp://0.0.0.0:10200", service=service, live=live, slots=slots, ...)
    await door.start()          # listening (and advertised, with `zeroconf`)
    ...
    await door.close()          # stops listening, lets replies end, withdraws the advert

It is a client of the casts layer like the api: it submits casts through the `CastService`,
makes live casts through `LiveCasts` and reads the playable sequence; it never loads the
model. It listens itself (`tcp://host:port` or `unix:///path`) and hands each accepted socket
to a `Connection`, whose events the `wyoming` package decodes. Its connections hold slots of
the `StreamSlots` it is given: under `speechd serve` the api's own, so the api's stream caps
count Wyoming connections too.

**Who may connect.** The protocol has no authentication, so a TCP connection from an address
outside `allow` (`--wyoming-allow`; by default loopback and the private ranges) is closed as it
is accepted, before a byte is read, with a log line (at most one a minute, with how many were
refused, and no address). A unix socket is guarded by its file's permissions. The door's own
`CastService` is given a share of the queue (`--wyoming-queue-share` of `--max-queue`,
`wyoming_door`), so Wyoming's requests cannot fill the line that HTTP callers wait in.

**A unix socket's path** is taken only when it is free or holds a stale socket (one nothing
answers on): a path that is something else (a file, a folder, a link) or a socket a server
answers on is refused (`OSError`), and on close the socket is removed only if it is still the
one this door made.

**Stopping.** `close` stops accepting and withdraws the advert, then lets each connection
finish the reply it is making (a streamed synthesis to its `synthesize-stop`) for up to
`close_s`, while an idle one is closed at once; past `close_s` a reply still going gets an
`error` (and `audio-stop` when its audio had started) and its connection is closed. Casts go
on either way: a link replays them.

`wyoming_door(settings, ...)` builds one from the settings (its services over the store they
name), as `speechd serve` and `speechd wyoming` do.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import logging
import os
import socket
import stat
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any, Literal
from urllib.parse import urlparse

import msgspec

from speechd.config import PRIVATE_NETWORKS, Settings, parse_networks
from speechd.limits import StreamSlots
from speechd.service import CastService, LiveCasts, cast_url, open_services

from ._bounds import CLOSE_S, IDLE_S, SEND_TIMEOUT_S
from ._session import Connection
from ._zeroconf import Advertisement, AdvertisingFailed

__all__ = ["WyomingDoor", "queue_share", "stream_slots", "wyoming_door"]

log = logging.getLogger("speechd.wyoming")

_CUT_S = 5.0  # then how long the cut replies get to send their `error` and close
_REFUSED_LOG_S = 60.0  # at most one line about refused connections in this long
_PROBE_S = 1.0  # how long a stale unix socket's probe waits for an answer

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


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
        allow: Iterable[Network] = PRIVATE_NETWORKS,
        idle_s: float = IDLE_S,
        send_timeout_s: float = SEND_TIMEOUT_S,
        close_s: float = CLOSE_S,
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
        self.allow = tuple(allow)
        """The networks a TCP client's address must be in (`--wyoming-allow`)."""
        self.idle_s = idle_s
        """How long a connection may wait between the events it sends."""
        self.send_timeout_s = send_timeout_s
        """How long an event may wait for its client to read it before the client is dropped."""
        self.close_s = close_s
        """How long replies under way get to end when the server stops."""
        self.stopping = asyncio.Event()
        """Set when the server stops: connections take no new request."""
        self.closing = asyncio.Event()
        """Set when the replies still going are cut (`close_s` after `stopping`): each sends
        its `error`; their casts go on."""
        self._zeroconf = zeroconf
        self._advert: Advertisement | None = None
        self._server: asyncio.AbstractServer | None = None
        self._socket_file: tuple[str, int, int] | None = None  # (path, device, inode)
        self._refused = 0
        self._refused_logged = -_REFUSED_LOG_S
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
        """Listen (and advertise, when asked); raises OSError when the address is taken
        (see the module docstring for a unix socket's path) or ValueError for a URI that is
        neither `tcp://` nor `unix://`."""
        parsed = urlparse(self.uri)
        if parsed.scheme == "unix":
            sock, self._socket_file = _unix_listener(parsed.path)
            try:
                self._server = await asyncio.start_unix_server(self._accept, sock=sock)
            except BaseException:
                sock.close()
                self._remove_socket_file()
                raise
        elif parsed.scheme == "tcp" and parsed.hostname and parsed.port is not None:
            self._server = await asyncio.start_server(
                self._accept, host=parsed.hostname, port=parsed.port
            )
        else:
            raise ValueError(f"{self.uri!r}: use tcp://host:port or unix:///path")
        if self._zeroconf is not None:
            if parsed.scheme != "tcp":
                log.warning("zeroconf advertises tcp:// servers only; %s is not", self.uri)
            else:
                try:
                    advert = Advertisement(self._zeroconf, parsed.hostname or "", parsed.port or 0)
                    await advert.start()
                except (OSError, ValueError, AdvertisingFailed) as exc:
                    # Serving goes on, undiscovered: Home Assistant can be given the address.
                    log.warning("cannot advertise %s over zeroconf: %s", self.uri, exc)
                else:
                    self._advert = advert
        log.info("speechd Wyoming server on %s", self.uri)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self._allowed(writer.get_extra_info("peername")):
            writer.transport.abort()  # before a byte is read; nothing to say to it
            return
        await Connection(reader, writer, self).run()

    def _allowed(self, peer: object) -> bool:
        """Whether a client at `peer` (a socket's peer name) may connect: a unix socket's
        always; a TCP client's when its address is in `allow`."""
        host = peer[0] if isinstance(peer, tuple) and peer else None
        if not isinstance(host, str):
            return True  # a unix socket: its file's permissions decide
        try:
            address = ipaddress.ip_address(host.partition("%")[0])
        except ValueError:
            address = None
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped  # an IPv4 client of a dual-stack socket
        if address is not None and any(address in network for network in self.allow):
            return True
        self._refused += 1
        now = time.monotonic()
        if now - self._refused_logged >= _REFUSED_LOG_S:  # no address: a client's is its own
            log.warning(
                "refused %d Wyoming connection(s) from addresses outside --wyoming-allow",
                self._refused,
            )
            self._refused, self._refused_logged = 0, now
        return False

    async def close(self) -> None:
        """Stop listening, let the replies under way end (see the module docstring), close
        the connections (their casts go on), withdraw the advert."""
        self.stopping.set()
        server, self._server = self._server, None
        if server is not None:
            server.close()  # stops accepting; the connections stay open
        self._remove_socket_file()
        if self._advert is not None:
            advert, self._advert = self._advert, None
            with contextlib.suppress(Exception):
                await advert.close()
        pending = set(self.connections)
        if pending:
            _, pending = await asyncio.wait(pending, timeout=self.close_s)
        self.closing.set()
        if pending:
            _, late = await asyncio.wait(pending, timeout=_CUT_S)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=_CUT_S)

    def _remove_socket_file(self) -> None:
        """Remove the unix socket this door made, if it is still there (not another's)."""
        made, self._socket_file = self._socket_file, None
        if made is None:
            return
        path, device, inode = made
        with contextlib.suppress(OSError):
            found = os.lstat(path)
            if (found.st_dev, found.st_ino) == (device, inode):
                os.unlink(path)


def _unix_listener(path: str) -> tuple[socket.socket, tuple[str, int, int]]:
    """A listening socket bound at `path`, and the file it made (see the module docstring):
    OSError for a path that is not a socket, or one a server answers on."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            sock.bind(path)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            _check_stale(path)
            os.unlink(path)
            sock.bind(path)
        sock.listen(100)
        sock.setblocking(False)
        made = os.lstat(path)
    except BaseException:
        sock.close()
        raise
    return sock, (path, made.st_dev, made.st_ino)


def _check_stale(path: str) -> None:
    """Return if `path` is a socket nothing answers on (left by a server that died); raise
    OSError if it is something else, or a socket a server answers on."""
    found = os.lstat(path)
    if not stat.S_ISSOCK(found.st_mode):
        raise OSError(errno.EEXIST, f"{path} exists and is not a socket; it is left as it is")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(_PROBE_S)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        return  # nobody listens: stale
    except OSError as exc:
        raise OSError(errno.EADDRINUSE, f"{path}: a socket that does not answer ({exc})") from exc
    finally:
        probe.close()
    raise OSError(errno.EADDRINUSE, f"{path}: a server is listening on it already")


def queue_share(settings: Settings) -> int:
    """How many casts the queue may hold for a Wyoming request to be taken: the
    `wyoming_queue_share` of `max_queue`, at least 1."""
    return max(1, int(settings.max_queue * settings.wyoming_queue_share))


@contextlib.asynccontextmanager
async def wyoming_door(
    settings: Settings, *, slots: StreamSlots | None = None
) -> AsyncIterator[WyomingDoor]:
    """A started door for `settings` (which must name `wyoming_uri`), over the store they name,
    closed on exit (its socket closed too when it fails to start). `slots`: the api's stream
    slots, to share its caps (else its own, from the same settings)."""
    if settings.wyoming_uri is None:
        raise ValueError("no Wyoming URI is set")
    if settings.api_keys:
        log.warning(
            "the Wyoming server has no authentication: whoever reaches %s can synthesize",
            settings.wyoming_uri,
        )
    allow = parse_networks(settings.wyoming_allow)
    # Wyoming's requests take at most their share of the queue (see the module docstring).
    shared = msgspec.structs.replace(settings, max_queue=queue_share(settings))
    async with contextlib.AsyncExitStack() as stack:
        service, live, _books = await stack.enter_async_context(open_services(shared))
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
            allow=allow,
        )
        stack.push_async_callback(door.close)  # before `start`: a failed start closes too
        await door.start()
        yield door


def stream_slots(settings: Settings) -> StreamSlots:
    """Stream slots with the api's caps from `settings` (`--max-streams`,
    `--max-client-streams`), for a door that runs without the api."""
    return settings.stream_slots()
