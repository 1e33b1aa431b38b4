"""Live casts, HTTP-free: making one, writing its input, following its audio.

    live = LiveCasts(service, secret, idle_s=60)
    cast = await live.create(LiveRequest(voice="af_heart", format="mp3", text="Hello"))
    await live.append(cast.id, " there.", done=True, seq=1, token=cast.token)
    async for event in live.events(cast.id): ...      # AudioChunk..., then Eos or Failure

A live cast is an ordinary cast whose recipe says `live` and whose text arrives in the
private stream `input/<id>` (`speechd.casts._input`). Its id is random (there is no text to
address it by) and so is its input token; the recipe keeps only the token's digest, keyed
with the deployment secret, so neither the store nor a log holds the token. The job is
enqueued at once: the worker follows the input and speaks what has arrived.

Every piece is bounded before anything touches the store (`MAX_PIECE_CHARS`), and the whole
input is bounded as it grows (`MAX_LIVE_CHARS`, `MAX_PIECES`), from the last record alone.
A store failure is `StoreUnavailable` (a 503 `store_unavailable`), with one log line, as under
every method of the service (`_trouble`).
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import hashlib
import hmac
import secrets
import time
from collections.abc import AsyncIterator, Callable
from typing import Final

import msgspec

from speechd import casts
from speechd.audio import SAMPLE_RATE
from speechd.casts import schema
from speechd.durable import SeqMismatch, Store
from speechd.errors import (
    AuthenticationFailed,
    CastFailed,
    CastNotFound,
    CastNotLive,
    InvalidRequest,
    SpeechdError,
)

from ._casts import CastService
from ._reader import checked_id
from ._requests import (
    MAX_LIVE_CHARS,
    MAX_PIECE_CHARS,
    MAX_PIECES,
    MAX_TOKEN_CHARS,
    LiveRequest,
    check_piece,
)
from ._trouble import guarded, store_trouble

__all__ = ["DEFAULT_IDLE_S", "LiveCast", "LiveCasts"]

DEFAULT_IDLE_S: Final = 60.0
"""An input idle this long is closed as if `done` had come (`--live-idle-timeout`)."""

_TOKEN_BYTES = 32
_ID_BYTES = 16
_RECIPES = 1024  # recipes kept in memory (they never change); past it the oldest go
_TITLE = "Live cast"


class LiveCast(msgspec.Struct, frozen=True):
    id: str
    token: str
    """The bearer token that writes the input; shown once, never stored."""
    recipe: schema.Recipe
    input: casts.InputState


class LiveCasts:
    """Live casts on one cast service's store. One per app, built in its lifespan."""

    def __init__(
        self,
        service: CastService,
        secret: bytes,
        *,
        idle_s: float = DEFAULT_IDLE_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.service = service
        self._store: Store = service._store  # a live cast's input lives beside its cast
        self.idle_s = idle_s
        self._secret = secret
        self._clock = clock
        self._recipes: collections.OrderedDict[str, schema.Recipe] = collections.OrderedDict()
        self.closing = asyncio.Event()
        """Set when the server shuts down: live sessions end."""

    def close(self) -> None:
        self.closing.set()

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _token_key(self, token: str) -> str:
        digest = hashlib.blake2b(
            token.encode(), key=self._secret[:64], digest_size=32, person=b"speechd-input"
        )
        return digest.hexdigest()

    # -- making one ---------------------------------------------------------------------

    async def create(self, request: LiveRequest) -> LiveCast:
        """Make a live cast, its input holding `request.text` (if any); raises what
        `CastService.check` raises for a bad first piece, format, speed or voice, or a full
        queue."""
        checked = await self.service.check(request)
        cast_id = base64.urlsafe_b64encode(secrets.token_bytes(_ID_BYTES)).rstrip(b"=").decode()
        token = secrets.token_urlsafe(_TOKEN_BYTES)
        now_ms = self._now_ms()
        # A live cast's title is never taken from its text: its first piece may be a word.
        recipe = msgspec.structs.replace(
            checked.recipe(title=request.title or _TITLE, created_ms=now_ms),
            text="",  # its text comes in its input
            live=True,
            input_key=self._token_key(token),
            idle_s=self.idle_s,
        )
        state = casts.InputState(0, 0, None, 0, 0)
        if request.text:
            # Before the job exists, so the worker finds the first piece at once.
            piece = schema.piece_record(request.text, len(request.text))
            stream = schema.input_stream(cast_id)
            with store_trouble("making a live cast"):
                try:
                    ack = await self._store.append(stream, [piece], match_seq_num=0)
                except SeqMismatch as exc:  # 128 random bits collided: never, in practice
                    raise SpeechdError("A new live cast could not be named; try again.") from exc
            state = casts.InputState(1, len(request.text), None, ack.timestamp, 1)
        with store_trouble("making a live cast"):
            await casts.submit(self._store, cast_id, recipe, sample_rate=SAMPLE_RATE)
        self._remember(cast_id, recipe)
        return LiveCast(cast_id, token, recipe, state)

    # -- writing its input --------------------------------------------------------------

    async def append(
        self,
        cast_id: str,
        text: str,
        *,
        done: bool,
        seq: int | None = None,
        token: str | None = None,
        key_ok: bool = False,
    ) -> casts.InputState:
        """Append a piece (and, with `done`, close the input). `token`: the bearer token the
        request carried; `key_ok`: it carried one of the server's API keys instead.

        Raises `CastNotFound`, `CastNotLive` (409), `AuthenticationFailed` (401),
        `PayloadTooLarge` (a piece over `MAX_PIECE_CHARS`), `InvalidRequest` (control
        characters; neither text nor done), and what `casts.append_input` raises: `InputClosed`,
        `InputSeqMismatch` (409, with the expected `seq`), `InputTooLong` (413).
        """
        if not casts.is_cast_id(cast_id):
            raise CastNotFound("No cast with this id.", param="id")
        if len(text) > MAX_PIECE_CHARS:  # before anything else: the cheapest bound
            check_piece(text)
        if not text and not done:
            raise InvalidRequest("Nothing to append: send text, or done: true.", param="text")
        recipe = await self._recipe(cast_id)
        if not key_ok:
            self._check_token(recipe, token)
        check_piece(text)
        with store_trouble("appending a live cast's input"):
            return await casts.append_input(
                self._store,
                cast_id,
                text,
                done=done,
                seq=seq,
                opened_ms=recipe.created_ms,
                idle_s=recipe.idle_s,
                now_ms=self._now_ms(),
                max_chars=MAX_LIVE_CHARS,
                max_pieces=MAX_PIECES,
            )

    def _check_token(self, recipe: schema.Recipe, token: str | None) -> None:
        if token is None or len(token) > MAX_TOKEN_CHARS:  # never hashed
            raise AuthenticationFailed(
                "Writing a live cast's input needs its input token: send "
                "'Authorization: Bearer <input_token>'."
            )
        if not hmac.compare_digest(self._token_key(token), recipe.input_key):
            raise AuthenticationFailed("Incorrect input token for this live cast.")

    async def _recipe(self, cast_id: str) -> schema.Recipe:
        recipe = self._recipes.get(cast_id)
        if recipe is not None:
            self._recipes.move_to_end(cast_id)
            return recipe
        with store_trouble("reading a live cast's recipe"):
            batch = await self._store.read(schema.catalog_stream(cast_id), 0, max_records=1)
        if not batch.records:
            raise CastNotFound(f"No cast with id {cast_id!r}.", param="id")
        recipe = schema.decode(batch.records[0].body, schema.Recipe)
        if not recipe.live:
            raise CastNotLive("This cast is not live: its whole text came with it.")
        self._remember(cast_id, recipe)
        return recipe

    def _remember(self, cast_id: str, recipe: schema.Recipe) -> None:
        self._recipes[cast_id] = recipe
        while len(self._recipes) > _RECIPES:
            self._recipes.popitem(last=False)

    async def input_state(self, cast_id: str) -> casts.InputState:
        """What the cast's input holds now (its pieces and characters, and whether it is
        closed)."""
        with store_trouble("reading a live cast's input"):
            return await casts.read_input_state(self._store, checked_id(cast_id))

    # -- following its audio ------------------------------------------------------------

    async def events(self, cast_id: str) -> AsyncIterator[schema.AudioChunk | schema.Eos]:
        """The cast's playable audio records in order, live, then its `Eos`; raises
        `CastFailed` if it fails (after the audio before the failure)."""
        sent = 0
        follow = guarded(casts.follow_cast(self._store, checked_id(cast_id)), "following a cast")
        async with contextlib.aclosing(follow):  # type: ignore[type-var]
            async for event in follow:
                if isinstance(event, schema.AudioChunk):
                    if event.index == sent:
                        sent += 1
                        yield event
                elif isinstance(event, schema.Eos):
                    yield event
                    return
                elif isinstance(event, schema.Failure):
                    raise CastFailed(f"The cast could not be synthesized: {event.message}")
