"""Live casts: speech that starts while its text is still being written.

    with client.live_cast(voice="af_heart") as cast:     # POST /v1/casts {"live": true}
        print(cast.url)                                  # share it, play it: it is live
        for token in llm_reply():
            cast.append(token)                           # POST /v1/casts/{id}/input
    # leaving the block says `done` (the cast then ends once the rest is spoken)
    with client.follow(cast.id) as audio: ...

Each piece carries `seq` (the pieces sent before it), so an append whose answer was lost is
sent again safely: the server refuses a duplicate with 409 and the `seq` it holds, which
tells this client its piece was taken. `AsyncLiveCast` is the same for `AsyncClient`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from . import _calls as calls
from ._calls import Call
from ._errors import Conflict, TransportError
from ._wire import InputAccepted, LiveCastCreated

__all__ = ["AsyncLiveCast", "LiveCast"]

T = TypeVar("T")


class _Base:
    def __init__(self, created: LiveCastCreated) -> None:
        self.id = created.id
        """The cast's id (follow it, replay it, share it)."""
        self.url = created.url
        """The cast's player page: it plays the speech as it is made."""
        self.input_url = created.input_url
        self.input_token = created.input_token
        """The token that writes the input (a secret: whoever has it can add text)."""
        self.seq = 0
        """Pieces the input holds (as far as this client knows)."""
        self.chars = 0
        self.closed = False

    def _call(self, text: str, done: bool) -> Call:
        return calls.live_input(self.id, self.input_token, text, done=done, seq=self.seq)

    def _took(self, accepted: InputAccepted) -> InputAccepted:
        self.seq, self.chars, self.closed = accepted.seq, accepted.chars, accepted.done
        return accepted

    def _taken_before(self, error: Conflict, text: str) -> bool:
        """Whether a 409 says the piece we sent again had landed the first time."""
        return error.code == "seq_mismatch" and error.seq == self.seq + (1 if text else 0)

    def _assumed(self, text: str, done: bool) -> InputAccepted:
        seq = self.seq + (1 if text else 0)
        return InputAccepted(self.id, seq, self.chars + len(text), done)


class LiveCast(_Base):
    """A live cast being written (`Client.live_cast`); a context manager that says `done`
    when its block ends."""

    def __init__(self, created: LiveCastCreated, send: Callable[[Call], InputAccepted]) -> None:
        super().__init__(created)
        self._send = send

    def __enter__(self) -> LiveCast:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        if not self.closed:
            try:
                self.done()
            except Exception:
                if exc_type is None:
                    raise  # an error of its own; otherwise the block's error is the news

    def append(self, text: str) -> InputAccepted:
        """Add `text` to the input (sent as is: keep the spaces between words)."""
        return self._write(text, done=False) if text else self._assumed("", False)

    def done(self, text: str = "") -> InputAccepted:
        """Close the input (with a last piece, if any): the cast ends once it is spoken."""
        return self._write(text, done=True)

    def _write(self, text: str, *, done: bool) -> InputAccepted:
        call = self._call(text, done)
        try:
            return self._took(self._send(call))
        except TransportError:
            pass  # the answer may have been lost: send the same piece (the same seq) again
        try:
            return self._took(self._send(call))
        except Conflict as exc:
            if not self._taken_before(exc, text):
                raise
            return self._took(self._assumed(text, done))


class AsyncLiveCast(_Base):
    """`LiveCast` for `AsyncClient`: `await cast.append(...)`, `async with`."""

    def __init__(
        self, created: LiveCastCreated, send: Callable[[Call], Awaitable[InputAccepted]]
    ) -> None:
        super().__init__(created)
        self._send = send

    async def __aenter__(self) -> AsyncLiveCast:
        return self

    async def __aexit__(self, exc_type: object, *_: object) -> None:
        if not self.closed:
            try:
                await self.done()
            except Exception:
                if exc_type is None:
                    raise

    async def append(self, text: str) -> InputAccepted:
        return await self._write(text, done=False) if text else self._assumed("", False)

    async def done(self, text: str = "") -> InputAccepted:
        return await self._write(text, done=True)

    async def _write(self, text: str, *, done: bool) -> InputAccepted:
        call = self._call(text, done)
        try:
            return self._took(await self._send(call))
        except TransportError:
            pass
        try:
            return self._took(await self._send(call))
        except Conflict as exc:
            if not self._taken_before(exc, text):
                raise
            return self._took(self._assumed(text, done))
