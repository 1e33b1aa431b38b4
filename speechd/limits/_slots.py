"""Caps on long-lived reads: SSE, long-polls, live audio and speech requests that wait.

Each such read holds a *slot* for as long as it runs. A client (`ClientAddress` key) may hold
`per_client` slots and the whole api `total`; past either cap a new one is refused before any
work starts: `TooManyStreams` (429) for the client's own cap, `ServerBusy` (503) for the
api's, both with `Retry-After`. Everything here runs on the event loop, so no lock is needed;
the table holds only clients with a slot open, so it is never larger than `total`.

A route takes its slot with `slots.take(scope)` (the client's key from `slots.clients`) or
`hold(scope, slots.acquire(key))`; `release_slots`, the ASGI wrapper `create_app` puts around
the app, gives back every slot a request held when its ASGI call ends, however it ends (the
body finished, the client went away, an error, a shutdown).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from speechd.errors import ServerBusy, TooManyStreams

from ._bounds import STREAM_RETRY_AFTER_S
from ._clients import ClientAddress

__all__ = ["Slot", "StreamSlots", "hold", "release_slots"]

_SCOPE_KEY = "speechd.slots"

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]


class Slot:
    """One long-lived read's place; `release()` gives it back (again is a no-op)."""

    __slots__ = ("_client", "_slots")

    def __init__(self, slots: StreamSlots, client: str) -> None:
        self._slots: StreamSlots | None = slots
        self._client = client

    def release(self) -> None:
        slots, self._slots = self._slots, None
        if slots is not None:
            slots._give_back(self._client)


class StreamSlots:
    """The long-lived reads one api holds: at most `per_client` per client, `total` in all."""

    def __init__(
        self,
        total: int,
        per_client: int,
        *,
        clients: ClientAddress | None = None,
        retry_after: int = STREAM_RETRY_AFTER_S,
    ) -> None:
        if total < 1 or per_client < 1:
            raise ValueError("stream caps must be at least 1")
        self.clients = clients or ClientAddress()
        self.total = total
        self.per_client = per_client
        self.retry_after = retry_after
        self.refused = {"client": 0, "total": 0}
        """Reads refused so far, by which cap refused them."""
        self._held: dict[str, int] = {}
        self._in_use = 0

    @property
    def in_use(self) -> int:
        return self._in_use

    def held_by(self, client: str) -> int:
        return self._held.get(client, 0)

    def acquire(self, client: str) -> Slot:
        """A slot for `client`; raises `TooManyStreams` or `ServerBusy` past a cap."""
        if self._held.get(client, 0) >= self.per_client:
            self.refused["client"] += 1
            raise TooManyStreams(
                f"This client already has {self.per_client} streams open; close one or retry "
                "later.",
                retry_after=self.retry_after,
            )
        if self._in_use >= self.total:
            self.refused["total"] += 1
            raise ServerBusy(
                "The server has as many streams open as it serves; retry later.",
                retry_after=self.retry_after,
            )
        self._held[client] = self._held.get(client, 0) + 1
        self._in_use += 1
        return Slot(self, client)

    def take(self, scope: Scope) -> Slot:
        """A slot for the client of the request `scope`, held until that request ends."""
        return hold(scope, self.acquire(self.clients.of_scope(scope)))

    def _give_back(self, client: str) -> None:
        left = self._held.get(client, 0) - 1
        if left > 0:
            self._held[client] = left
        else:
            self._held.pop(client, None)
        self._in_use -= 1


def hold(scope: Scope, slot: Slot) -> Slot:
    """Tie `slot` to the request of `scope`: `release_slots` gives it back when it ends."""
    scope.setdefault(_SCOPE_KEY, []).append(slot)
    return slot


def release_slots(app: ASGIApp) -> ASGIApp:
    """`app`, giving back the slots each request held once its ASGI call returns."""

    async def wrapped(scope: Scope, receive: Any, send: Any) -> None:
        try:
            await app(scope, receive, send)
        finally:
            for slot in scope.get(_SCOPE_KEY, ()):
                slot.release()

    return wrapped
