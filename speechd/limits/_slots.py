"""Caps on long-lived reads: SSE, long-polls, live audio, speech requests that wait, and (under
`speechd serve`) the Wyoming door's syntheses.

Each such read holds a *slot* for as long as it runs. A client (a key its door chooses: the
api's is `speechd.api`'s client address) may hold `per_client` slots and the whole server
`total`; past either cap a new one is refused before any work starts: `TooManyStreams` (429)
for the client's own cap, `ServerBusy` (503) for the server's, both with `Retry-After`.
Everything here runs on one event loop, so no lock is needed; the table holds only clients
with a slot open, so it is never larger than `total`. HTTP-free: the doors beside each other
share one `StreamSlots`, and each ties a slot to its own request's end.
"""

from __future__ import annotations

from speechd.errors import ServerBusy, TooManyStreams

from ._bounds import STREAM_RETRY_AFTER_S

__all__ = ["Slot", "StreamSlots"]


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
    """The long-lived reads one server holds: at most `per_client` per client, `total` in all."""

    def __init__(
        self,
        total: int,
        per_client: int,
        *,
        retry_after: int = STREAM_RETRY_AFTER_S,
    ) -> None:
        if total < 1 or per_client < 1:
            raise ValueError("stream caps must be at least 1")
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

    def _give_back(self, client: str) -> None:
        left = self._held.get(client, 0) - 1
        if left > 0:
            self._held[client] = left
        else:
            self._held.pop(client, None)
        self._in_use -= 1
