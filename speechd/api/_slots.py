"""The api's long-lived reads: each holds a slot of the server's `StreamSlots` (shared with
the Wyoming door under `speechd serve`), counted per client by its `ClientAddress`.

A route takes its slot with `ClientSlots.take(scope)`; `release_slots`, the ASGI wrapper
`create_app` puts around the app, gives back every slot a request held when its ASGI call
ends, however it ends (the body finished, the client went away, an error, a shutdown).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from speechd.limits import Slot, StreamSlots

from ._clients import ClientAddress

__all__ = ["ClientSlots", "release_slots"]

_SCOPE_KEY = "speechd.slots"

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]


class ClientSlots:
    """`slots`, keyed by the client of each request (`clients`)."""

    def __init__(self, slots: StreamSlots, clients: ClientAddress | None = None) -> None:
        self.slots = slots
        self.clients = clients or ClientAddress()

    def key(self, scope: Scope) -> str:
        """The key per-client limits count the request of `scope` by."""
        return self.clients.of_scope(scope)

    def take(self, scope: Scope) -> Slot:
        """A slot for the client of the request `scope`, held until that request ends; raises
        `TooManyStreams` or `ServerBusy` past a cap."""
        slot = self.slots.acquire(self.key(scope))
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
