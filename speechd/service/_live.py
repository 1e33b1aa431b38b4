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
A store failure is raised as it is (`speechd.durable.DurableError`): the api answers it with
a 503 `store_unavailable` and one log line, as it does on every route.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import hashlib
import hmac
import re
import secrets
import time
from collections.abc import AsyncIterator, Callable
from typing import Final

import msgspec

from speechd import casts
from speechd.audio import FORMATS, SAMPLE_RATE
from speechd.durable import SeqMismatch, Store
from speechd.engine import MAX_SPEED, MIN_SPEED
from speechd.errors import (
    AuthenticationFailed,
    CastFailed,
    CastNotFound,
    CastNotLive,
    InvalidRequest,
    PayloadTooLarge,
    SpeechdError,
)

from ._casts import MODEL, CastService

__all__ = [
    "DEFAULT_IDLE_S",
    "MAX_LIVE_CHARS",
    "MAX_PIECES",
    "MAX_PIECE_CHARS",
    "MAX_TOKEN_CHARS",
    "LiveCast",
    "LiveCasts",
    "LiveRequest",
    "bearer_token",
    "check_piece",
]

MAX_PIECE_CHARS: Final = 4096
"""The longest piece one append takes (an LLM sends a few characters at a time)."""
MAX_LIVE_CHARS: Final = 200_000
"""The longest input a live cast takes in all: as much as `POST /v1/casts` takes at once."""
MAX_PIECES: Final = 50_000
"""The most pieces one input takes (each is a record the worker reads)."""
MAX_TOKEN_CHARS: Final = 256
"""A bearer token longer than this is refused before it is hashed or compared."""
DEFAULT_IDLE_S: Final = 60.0
"""An input idle this long is closed as if `done` had come (`--live-idle-timeout`)."""

_TOKEN_BYTES = 32
_ID_BYTES = 16
_RECIPES = 1024  # recipes kept in memory (they never change); past it the oldest go
_TITLE = "Live cast"
# C0 and C1 control characters but tab, newline and carriage return; lone surrogates (as
# `CastService.submit` refuses them).
_FORBIDDEN = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")


class LiveRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A live cast someone asked for (the route checked the field types)."""

    voice: str | None = None
    speed: float = 1.0
    format: str = "mp3"
    title: str | None = None
    text: str = ""
    """A first piece of the input (may be empty)."""
    input_format: str | None = None
    """Only `text` (or None): a live cast's text is plain, its pronunciation markup and the
    lexicon included. SSML is read whole, so it is refused here: a document is only known to
    be well-formed and within its bounds at its end, and by then a live cast has spoken most
    of it (its markup read aloud, or an error after the audio)."""
    normalize: bool = True
    """False: read the text as sent, without speechd's normalisation."""


class LiveCast(msgspec.Struct, frozen=True):
    id: str
    token: str
    """The bearer token that writes the input; shown once, never stored."""
    recipe: casts.Recipe
    input: casts.InputState


def check_piece(text: str, *, param: str = "text") -> None:
    """Raise unless `text` may be a piece: at most `MAX_PIECE_CHARS`, no control characters
    (but tab and newlines), no lone surrogates. Whitespace is kept as sent."""
    if len(text) > MAX_PIECE_CHARS:
        raise PayloadTooLarge(
            f"A piece is at most {MAX_PIECE_CHARS} characters; this one has {len(text)} "
            "(send it in several).",
            param=param,
        )
    bad = _FORBIDDEN.search(text)
    if bad is not None:
        char = ord(bad.group())
        what = "an unpaired surrogate" if 0xD800 <= char <= 0xDFFF else "the control character"
        raise InvalidRequest(f"The text contains {what} U+{char:04X}.", param=param)


def bearer_token(authorization: str | None) -> str | None:
    """The token of `Authorization: Bearer <token>`, or None (absent, another scheme, or
    longer than `MAX_TOKEN_CHARS`: never hashed)."""
    if not authorization or len(authorization) > MAX_TOKEN_CHARS + 16:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > MAX_TOKEN_CHARS:
        return None
    return token


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
        self.store: Store = service.store
        self.idle_s = idle_s
        self._secret = secret
        self._clock = clock
        self._recipes: collections.OrderedDict[str, casts.Recipe] = collections.OrderedDict()
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
        `CastService.submit` raises for a bad format, speed or voice, or a full queue."""
        if request.format not in FORMATS:
            raise InvalidRequest(
                f"Unsupported format {request.format!r}; use one of {', '.join(FORMATS)}.",
                param="response_format",
            )
        if not MIN_SPEED <= request.speed <= MAX_SPEED:
            raise InvalidRequest(
                f"The speed must be between {MIN_SPEED} and {MAX_SPEED}.", param="speed"
            )
        check_piece(request.text, param="input")
        if request.input_format not in (None, "text"):
            raise InvalidRequest(
                "A live cast takes plain text (with [word](/phonemes/) pronunciations): an SSML "
                "document is only checked whole, so make it a cast of its own (no `live`).",
                param="input_format",
            )
        voice = await self.service.resolve_voice(request.voice)
        await self.service.check_queue()
        cast_id = base64.urlsafe_b64encode(secrets.token_bytes(_ID_BYTES)).rstrip(b"=").decode()
        token = secrets.token_urlsafe(_TOKEN_BYTES)
        now_ms = self._now_ms()
        recipe = casts.Recipe(
            text="",
            model=MODEL,
            voice=voice,
            speed=round(float(request.speed), 3),
            format=request.format,
            title=request.title or _TITLE,  # its first piece may be a word or two
            created_ms=now_ms,
            live=True,
            input_key=self._token_key(token),
            idle_s=self.idle_s,
            normalize=request.normalize,
        )
        state = casts.InputState(0, 0, None, 0, 0)
        if request.text:
            # Before the job exists, so the worker finds the first piece at once.
            piece = casts.piece_record(request.text, len(request.text))
            stream = casts.input_stream(cast_id)
            try:
                ack = await self.store.append(stream, [piece], match_seq_num=0)
            except SeqMismatch as exc:  # 128 random bits collided: never, in practice
                raise SpeechdError("A new live cast could not be named; try again.") from exc
            state = casts.InputState(1, len(request.text), None, ack.timestamp, 1)
        await casts.submit(self.store, cast_id, recipe, sample_rate=SAMPLE_RATE)
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
        return await casts.append_input(
            self.store,
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

    def _check_token(self, recipe: casts.Recipe, token: str | None) -> None:
        if token is None:
            raise AuthenticationFailed(
                "Writing a live cast's input needs its input token: send "
                "'Authorization: Bearer <input_token>'."
            )
        if not hmac.compare_digest(self._token_key(token), recipe.input_key):
            raise AuthenticationFailed("Incorrect input token for this live cast.")

    async def _recipe(self, cast_id: str) -> casts.Recipe:
        recipe = self._recipes.get(cast_id)
        if recipe is not None:
            self._recipes.move_to_end(cast_id)
            return recipe
        batch = await self.store.read(casts.catalog_stream(cast_id), 0, max_records=1)
        if not batch.records:
            raise CastNotFound(f"No cast with id {cast_id!r}.", param="id")
        recipe = casts.decode(batch.records[0].body, casts.Recipe)
        if not recipe.live:
            raise CastNotLive("This cast is not live: its whole text came with it.")
        self._remember(cast_id, recipe)
        return recipe

    def _remember(self, cast_id: str, recipe: casts.Recipe) -> None:
        self._recipes[cast_id] = recipe
        while len(self._recipes) > _RECIPES:
            self._recipes.popitem(last=False)

    async def input_state(self, cast_id: str) -> casts.InputState:
        return await casts.read_input_state(self.store, cast_id)

    # -- following its audio ------------------------------------------------------------

    async def events(self, cast_id: str) -> AsyncIterator[casts.AudioChunk | casts.Eos]:
        """The cast's playable audio records in order, live, then its `Eos`; raises
        `CastFailed` if it fails (after the audio before the failure)."""
        sent = 0
        follow = casts.follow_cast(self.store, cast_id)
        async with contextlib.aclosing(follow):  # type: ignore[type-var]
            async for event in follow:
                if isinstance(event, casts.AudioChunk):
                    if event.index == sent:
                        sent += 1
                        yield event
                elif isinstance(event, casts.Eos):
                    yield event
                    return
                elif isinstance(event, casts.Failure):
                    raise CastFailed(f"The cast could not be synthesized: {event.message}")
