"""Wake-ups between the open stores of one data folder: datagrams saying "these streams changed".

After a commit the writer sends the changed stream names as one datagram to every other open
store's abstract unix socket (Linux), listing `wake/` afresh each time; a reader waiting in
another process wakes within a millisecond. A datagram can be dropped (a full socket buffer),
and abstract sockets are per network namespace (two containers sharing a volume cannot reach
each other's), so each store also polls SQLite's `data_version` while anyone waits
(`_embedded`); that bounds a missed wake-up to the poll interval.

A registration `wake/<token>` is made under a temporary name, flock'd by its owner, and only
then renamed into place, so its lock is held from the moment anyone can see it until the owner
closes or dies (the kernel drops the lock then). A datagram refused (ECONNREFUSED) means
nobody listens at that address *in this network namespace*: the registration is removed only
if its lock is free (its owner is gone). A live store in another namespace keeps its
registration, so the stores of its own namespace still wake it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import re
import secrets
import socket
import sys
import time
from pathlib import Path

__all__ = ["Waiters", "WakeBus"]

log = logging.getLogger("speechd.durable")

_MAX_WAKE_PAYLOAD = 16 * 1024
_FOREIGN_RECHECK_S = 10.0  # a live peer we cannot reach is skipped this long
_TOKEN = re.compile(r"[0-9]+-[0-9a-f]{12}")


def _owner_alive(path: Path) -> bool:
    """Whether the store that registered `path` still holds it open (its flock is taken)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return True  # cannot tell: keep it
    finally:
        os.close(fd)  # releases the lock if we got it
    return False


class WakeBus:
    """This store's wake socket and registration, and the broadcast to the others."""

    def __init__(self, data_dir: Path) -> None:
        self._dir = data_dir / "wake"
        self._dir.mkdir(exist_ok=True)
        self._namespace = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:16]
        self._token = f"{os.getpid()}-{secrets.token_hex(6)}"
        self._listener: socket.socket | None = None
        self._sender: socket.socket | None = None
        self._lock_fd: int | None = None
        self._foreign: dict[str, float] = {}  # live peers we cannot reach -> when to retry
        if sys.platform.startswith("linux"):
            self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._listener.bind(self._address(self._token))
            self._listener.setblocking(False)
            self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sender.setblocking(False)
            self._register()

    def _register(self) -> None:
        # Registered only once bound and locked, so a peer never finds a token with no socket
        # behind it, nor one whose lock looks free.
        staging = self._dir / f".{self._token}.new"
        fd = os.open(staging, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.rename(staging, self._dir / self._token)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                staging.unlink()
            raise
        self._lock_fd = fd

    @property
    def listener(self) -> socket.socket | None:
        return self._listener

    @property
    def token(self) -> str:
        return self._token

    def _address(self, token: str) -> bytes:
        return f"\0speechd/{self._namespace}/{token}".encode()

    def _peers(self) -> list[str]:
        # Listed afresh for every broadcast (a few microseconds next to the commit's fsync): a
        # listing cached by the folder's mtime misses a store that registers within the mtime's
        # granularity (a jiffy, or a second on some filesystems), which then never hears a wake.
        try:
            names = os.listdir(self._dir)
        except FileNotFoundError:
            return []
        return [name for name in names if name != self._token and _TOKEN.fullmatch(name)]

    def broadcast(self, streams: list[str]) -> None:
        """Tell every other store in this folder which streams changed (writer thread)."""
        if self._sender is None:
            return
        payload = "\n".join(dict.fromkeys(streams)).encode()
        if len(payload) > _MAX_WAKE_PAYLOAD:
            payload = b"*"
        now = time.monotonic()
        for peer in self._peers():
            if self._foreign.get(peer, 0.0) > now:
                continue
            try:
                self._sender.sendto(payload, self._address(peer))
            except (ConnectionRefusedError, FileNotFoundError):
                self._unreachable(peer, now)
            except OSError as exc:
                # A full buffer (EAGAIN, ENOBUFS) or anything else: this peer misses one
                # datagram, and its data_version poll catches the change.
                if exc.errno not in (errno.EAGAIN, errno.ENOBUFS):
                    log.debug("store: wake datagram to %s failed: %s", peer, exc)
            else:
                self._foreign.pop(peer, None)

    def _unreachable(self, peer: str, now: float) -> None:
        """Nobody listens at `peer`'s address here: its owner died, or lives elsewhere."""
        path = self._dir / peer
        if _owner_alive(path):
            # A store in another network namespace: keep it, and stop knocking for a while.
            # (A registration made by an older speechd holds no lock, so it is removed as
            # before: that speechd then wakes by the poll only.)
            self._foreign[peer] = now + _FOREIGN_RECHECK_S
            return
        self._foreign.pop(peer, None)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()

    def receive(self) -> list[str] | None:
        """Drain pending datagrams: the changed stream names, or None for 'anything'."""
        assert self._listener is not None
        names: list[str] = []
        while True:
            try:
                data = self._listener.recv(65536)
            except BlockingIOError:
                return names
            if data == b"*":
                return None
            try:
                names.extend(data.decode("ascii").split("\n"))
            except UnicodeDecodeError:
                return None  # not from a store (anyone may send here): wake everyone

    def close(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self._dir / self._token).unlink()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        for sock in (self._listener, self._sender):
            if sock is not None:
                sock.close()


class Waiters:
    """The readers of one store waiting at a tail, by stream; `wake` ends their waits."""

    def __init__(self) -> None:
        self._by_stream: dict[str, set[asyncio.Future[None]]] = {}

    def __bool__(self) -> bool:
        return bool(self._by_stream)

    def register(self, stream: str) -> asyncio.Future[None]:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._by_stream.setdefault(stream, set()).add(waiter)
        return waiter

    def unregister(self, stream: str, waiter: asyncio.Future[None]) -> None:
        waiters = self._by_stream.get(stream)
        if waiters is not None:
            waiters.discard(waiter)
            if not waiters:
                del self._by_stream[stream]

    def wake(self, streams: list[str] | None) -> None:
        """Wake the waiters of `streams` (None: everyone)."""
        names = list(self._by_stream) if streams is None else streams
        for name in names:
            for waiter in self._by_stream.get(name, ()):
                if not waiter.done():
                    waiter.set_result(None)

    def fail(self, exc: BaseException) -> None:
        for waiters in self._by_stream.values():
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_exception(exc)
