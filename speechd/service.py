"""The cast service: what every route that makes or reads casts calls, HTTP-free.

    request -> CastService.submit(CastRequest)       validate text, resolve the voice against
                                                     the ready workers, check the queue, claim
            -> SubmittedCast(id, created, recipe)    the cast (casts.submit): one cast, one job
    reading -> CastService.audio(id) / .status(id)   the playable attempt, live

`POST /v1/audio/speech` (openai_compat) and `POST /v1/casts` (gateway) both build a
`CastRequest` and call `submit`; they differ only in their wire shapes and limits. The service
never loads the model: voices and readiness come from the workers' notices in the store.
"""

from __future__ import annotations

import contextlib
import math
import re
import time
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence

import msgspec

from speechd import casts
from speechd.audio import FORMATS, SAMPLE_RATE
from speechd.durable import Store
from speechd.engine import LANGUAGES, MAX_SPEED, MIN_SPEED, VoiceBook
from speechd.errors import InvalidRequest, QueueFull, Unavailable
from speechd.worker import committed_offset, queue_depth, ready_workers

__all__ = [
    "MODEL",
    "CastRequest",
    "CastService",
    "SubmittedCast",
    "derive_title",
    "voice_label",
]

MODEL = "kokoro"
"""The one model speechd runs; every cast's recipe names it."""

_TITLE_CHARS = 80
_READY_TTL_S = 1.0
# C0 and C1 control characters but tab, newline and carriage return; lone surrogates.
_FORBIDDEN = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")


class CastRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A cast someone asked for, already shaped by its route (voice not yet resolved)."""

    text: str
    voice: str | None = None
    """A voice name, an OpenAI name, or a blend like `af_heart(2)+am_adam(1)`; None = default."""
    speed: float = 1.0
    format: str = "mp3"
    title: str | None = None


class SubmittedCast(msgspec.Struct, frozen=True):
    id: str
    created: bool
    """False when an identical request made this cast first (it may be done already)."""
    recipe: casts.Recipe


def derive_title(text: str) -> str:
    """A title for a cast that has none: its first line, cut at a word near 80 characters."""
    line = " ".join(text.strip().split("\n", 1)[0].split())
    if len(line) <= _TITLE_CHARS:
        return line
    cut = line[:_TITLE_CHARS].rsplit(" ", 1)[0] or line[:_TITLE_CHARS]
    return cut.rstrip(" ,;:") + "…"


_GENDERS = {"f": "female", "m": "male"}


def voice_label(voice: str) -> str:
    """A readable name for a Kokoro voice id: `af_heart` -> `Heart (American English, female)`."""
    prefix, sep, name = voice.partition("_")
    if not sep or len(prefix) != 2 or prefix[0] not in LANGUAGES or prefix[1] not in _GENDERS:
        return voice
    return f"{name.replace('_', ' ').title()} ({LANGUAGES[prefix[0]]}, {_GENDERS[prefix[1]]})"


def _check_text(text: str, *, max_chars: int, param: str) -> str:
    """`text` stripped, or `InvalidRequest` if it is empty, too long or not speakable text."""
    if len(text) > max_chars:
        raise InvalidRequest(f"The input is longer than {max_chars} characters.", param=param)
    bad = _FORBIDDEN.search(text)
    if bad is not None:
        char = ord(bad.group())
        what = "an unpaired surrogate" if 0xD800 <= char <= 0xDFFF else "the control character"
        raise InvalidRequest(f"The input contains {what} U+{char:04X}.", param=param)
    text = text.strip()
    if not text:
        raise InvalidRequest("The input is empty: there is nothing to speak.", param=param)
    return text


class CastService:
    """Makes and reads casts on one store. One per app, built in its lifespan."""

    def __init__(
        self,
        store: Store,
        secret: bytes,
        *,
        max_queue: int,
        default_voice: str,
        voice_map: Mapping[str, str],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self._secret = secret
        self._max_queue = max_queue
        self._default_voice = default_voice
        self._voice_map = dict(voice_map)
        self._clock = clock
        self._ready: tuple[float, list[casts.WorkerNotice]] | None = None
        self._book: tuple[tuple[str, ...], VoiceBook] | None = None

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    # -- workers, voices, readiness -----------------------------------------------------

    async def workers(self) -> list[casts.WorkerNotice]:
        """The workers whose model is loaded and whose heartbeat is fresh (cached ~1 s)."""
        now = self._clock()
        if self._ready is not None and now - self._ready[0] < _READY_TTL_S:
            return self._ready[1]
        found = await ready_workers(self.store, now_ms=int(now * 1000))
        # Only a positive answer is cached, so the first ready worker is seen at once.
        self._ready = (now, found) if found else None
        return found

    async def require_workers(self) -> list[casts.WorkerNotice]:
        """The ready workers; raises `Unavailable` when there is none."""
        found = await self.workers()
        if not found:
            raise Unavailable("No worker is ready yet (the model may still be loading).")
        return found

    async def voices(self) -> list[str]:
        """Voices installed on the ready workers; raises `Unavailable` when none is ready."""
        return list(self._voice_book(await self.require_workers()).installed)

    def _voice_book(self, workers: Sequence[casts.WorkerNotice]) -> VoiceBook:
        installed = tuple(sorted({v for w in workers for v in w.voices}))
        if self._book is None or self._book[0] != installed:
            book = VoiceBook(
                list(installed), voice_map=self._voice_map, default_voice=self._default_voice
            )
            self._book = (installed, book)
        return self._book[1]

    async def resolve_voice(self, voice: str | None) -> str:
        """The voice spec a cast asking for `voice` (None: the default) is made with; raises
        `UnknownVoice`, or `Unavailable` when no worker is ready."""
        book = self._voice_book(await self.require_workers())
        return book.resolve(voice or self._default_voice)

    # -- making casts -------------------------------------------------------------------

    async def check_queue(self) -> None:
        """Raise `QueueFull` when a new cast would find the queue full (as `submit` does)."""
        depth = await self.queue_depth()
        if depth >= self._max_queue:
            raise QueueFull(
                f"The synthesis queue is full ({depth} casts waiting); try again shortly.",
                retry_after=self._retry_after(depth),
            )

    async def queue_depth(self) -> int:
        """Jobs appended but not yet finished: `jobs` past the workers' committed cursor."""
        return await queue_depth(self.store)

    async def pending_casts(self, *, limit: int) -> list[str]:
        """Ids of the unfinished jobs' casts (queued or generating), oldest first."""
        offset = await committed_offset(self.store)
        tail = await self.store.check_tail(casts.JOBS)
        found: dict[str, None] = {}
        while offset < tail and len(found) < limit:
            batch = await self.store.read(casts.JOBS, offset, max_records=min(limit, 1000))
            if not batch.records:
                break
            for record in batch.records:
                found[casts.decode(record.body, casts.Job).id] = None
            offset = batch.records[-1].seq_num + 1
        return list(found)[:limit]

    async def submit(
        self, request: CastRequest, *, max_chars: int, text_param: str = "input"
    ) -> SubmittedCast:
        """Validate `request`, then create its cast unless an identical one exists.

        Raises `InvalidRequest` (bad text, format or speed), `UnknownVoice`, `Unavailable` (no
        ready worker) or `QueueFull`. Nothing is written to the store unless all checks pass.
        """
        text = _check_text(request.text, max_chars=max_chars, param=text_param)
        if request.format not in FORMATS:
            raise InvalidRequest(
                f"Unsupported format {request.format!r}; use one of {', '.join(FORMATS)}.",
                param="response_format",
            )
        if not MIN_SPEED <= request.speed <= MAX_SPEED:
            raise InvalidRequest(
                f"The speed must be between {MIN_SPEED} and {MAX_SPEED}.", param="speed"
            )
        book = self._voice_book(await self.require_workers())
        voice = book.resolve(request.voice or self._default_voice)
        speed = round(float(request.speed), 3)
        cast_id = casts.cast_id(
            self._secret, model=MODEL, voice=voice, speed=speed, format=request.format, text=text
        )
        recipe = casts.Recipe(
            text=text,
            model=MODEL,
            voice=voice,
            speed=speed,
            format=request.format,
            title=request.title or derive_title(text),
            created_ms=self._now_ms(),
        )
        if await self.store.check_tail(casts.cast_stream(cast_id)) == 0:
            depth = await self.queue_depth()
            if depth >= self._max_queue:
                raise QueueFull(
                    f"The synthesis queue is full ({depth} casts waiting); try again shortly.",
                    retry_after=self._retry_after(depth),
                )
        submission = await casts.submit(self.store, cast_id, recipe, sample_rate=SAMPLE_RATE)
        return SubmittedCast(cast_id, submission.created, recipe)

    def _retry_after(self, depth: int) -> int:
        # A cast takes seconds to render; suggest a wait that grows with the backlog.
        return min(60, max(1, math.ceil((depth - self._max_queue + 1) * 2)))

    # -- reading casts ------------------------------------------------------------------

    async def audio(self, cast_id: str) -> AsyncGenerator[bytes, None]:
        """The cast's audio bytes, live until `eos`, skipping records that hold none (an
        encoder may not have a whole frame yet); raises `CastFailed` if the cast fails."""
        async with contextlib.aclosing(casts.cast_audio(self.store, cast_id)) as chunks:  # type: ignore[type-var]
            async for chunk in chunks:
                if chunk:
                    yield chunk

    async def status(self, cast_id: str) -> casts.CastStatus:
        """Where the cast stands; raises `CastNotFound`."""
        return await casts.cast_status(self.store, cast_id, now_ms=self._now_ms())
