"""The cast service: what every door (each route, the Wyoming server) that makes or reads
casts calls, HTTP-free.

    request -> CastService.submit(CastRequest)       check it (`check`: text, format, speed,
                                                     the voice against the ready workers, the
                                                     queue), then claim the cast
            -> SubmittedCast(id, created, recipe)    (casts.submit): one cast, one job
    reading -> CastService.status(id)                where it stands, its place in line
            -> CastService.reader                    its records, audio, words and file
                                                     (`CastReader`)

`POST /v1/audio/speech` (openai_compat) and `POST /v1/casts` (gateway) both build a
`CastRequest` and call `submit`; they differ only in their wire shapes and limits. A live cast
(`LiveCasts.create`) passes the same `check`. The service
never loads the model: voices, the languages the workers cannot speak, readiness and why no
worker is ready come from the workers' notices in the store (`worker_health`); the voice list
falls back to the last known set (`config/voices`) while no worker is ready. The queue limit
counts the casts waiting or being made (`QueueLine`), and a queued cast's status says its place
in line and when it should start. `watch_workers` is what a caller waiting on a cast races its
read against, so that it is never left waiting on workers that are not coming.

The service is the one door to the store: no caller gets the store from it. A store failure
under any of its methods is `StoreUnavailable`, with one log line (`_trouble`).
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple, NoReturn

import msgspec

from speechd import casts
from speechd.audio import SAMPLE_RATE, check_format
from speechd.casts import QueueLine, WorkerHealth, known_voices, schema, worker_health
from speechd.durable import SeqOutOfRange, Store
from speechd.engine import VoiceBook
from speechd.errors import (
    InvalidRequest,
    ModelUnavailable,
    QueueFull,
    Unavailable,
    VoiceUnavailable,
)
from speechd.limits import MAX_CAST_CHARS, MAX_VOICE_CHARS
from speechd.text import LANGUAGES, check_input, voice_language

from ._reader import CastReader, checked_id
from ._requests import (
    MODEL,
    CastRequest,
    CheckedRequest,
    LiveRequest,
    check_piece,
    check_speed,
    check_text,
    input_format,
    title_for,
)
from ._trouble import store_trouble

__all__ = [
    "UNREADY_GRACE_S",
    "CastService",
    "SubmittedCast",
    "voice_label",
]

UNREADY_GRACE_S = 90.0
"""How long a caller waiting on a cast waits while no worker is ready (a restart takes tens of
seconds) before it gets a 503. When the last worker heard from failed to load the model, it
gets the 503 at once."""

_INLINE_CHECK = 8192  # SSML longer than this is checked on a thread
_READY_TTL_S = 1.0
_UNREADY_TTL_S = 0.25  # short: the first ready worker is seen (almost) at once
_WATCH_S = 1.0  # how often a waiting caller looks at the workers


class SubmittedCast(msgspec.Struct, frozen=True):
    id: str
    created: bool
    """False when an identical request made this cast first (it may be done already)."""
    recipe: schema.Recipe
    unsupported: tuple[str, ...] = ()
    """SSML elements (and attributes, `say-as` kinds) outside the subset, each once: spoken
    as their text. A route names them in a response header."""


_GENDERS = {"f": "female", "m": "male"}


def voice_label(voice: str) -> str:
    """A readable name for a Kokoro voice id: `af_heart` -> `Heart (American English, female)`."""
    prefix, sep, name = voice.partition("_")
    if not sep or len(prefix) != 2 or prefix[0] not in LANGUAGES or prefix[1] not in _GENDERS:
        return voice
    return f"{name.replace('_', ' ').title()} ({LANGUAGES[prefix[0]]}, {_GENDERS[prefix[1]]})"


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
        unready_grace_s: float | None = None,
    ) -> None:
        self._store = store
        self.reader = CastReader(store)
        """What the doors read of casts (records, audio, words, files)."""
        self._secret = secret
        self._max_queue = max_queue
        self._default_voice = default_voice
        self._voice_map = dict(voice_map)
        self._clock = clock
        self._grace_s = UNREADY_GRACE_S if unready_grace_s is None else unready_grace_s
        self._health: tuple[float, WorkerHealth] | None = None
        self._health_lock = asyncio.Lock()
        self._book: tuple[tuple[object, ...], _Voices] | None = None
        self._line = QueueLine(store)

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    # -- workers, voices, readiness -----------------------------------------------------

    async def health(self) -> WorkerHealth:
        """The ready workers, and what the others said last (cached ~1 s when one is ready,
        a quarter of that when none is, so the first ready worker is seen at once)."""
        async with self._health_lock:  # one read of the workers for all who ask at once
            now = self._clock()
            if self._health is not None:
                at, health = self._health
                if now - at < (_READY_TTL_S if health.ready else _UNREADY_TTL_S):
                    return health
            with store_trouble("reading the workers' notices"):
                health = await worker_health(self._store, now_ms=int(now * 1000))
            self._health = (now, health)
            return health

    async def workers(self) -> list[schema.WorkerNotice]:
        """The workers whose model is loaded and whose heartbeat is fresh."""
        return (await self.health()).ready

    async def require_workers(self) -> list[schema.WorkerNotice]:
        """The ready workers; raises why there is none (`ModelUnavailable` with the worker's
        error when the model could not be loaded, else `Unavailable`)."""
        health = await self.health()
        problem = health.unavailable()
        if problem is not None:
            raise problem
        return health.ready

    async def watch_workers(self) -> NoReturn:
        """Wait as long as a caller waiting on a cast should: raises `ModelUnavailable` as soon
        as the model is known not to load, `Unavailable` once no worker has been ready for
        `UNREADY_GRACE_S` in a row. Race a read against it; it never returns."""
        since: float | None = None
        while True:
            problem = (await self.health()).unavailable()
            if problem is None:
                since = None
            elif isinstance(problem, ModelUnavailable):
                raise problem
            else:
                now = time.monotonic()
                since = now if since is None else since
                if now - since >= self._grace_s:
                    raise Unavailable(
                        f"{problem.message} Gave up after {self._grace_s:.0f} s without one."
                    )
            await asyncio.sleep(_WATCH_S)

    async def voices(self) -> list[str]:
        """The voices the ready workers can speak; while none is ready, those of the last
        worker that was (kept in the store). Raises why no worker is ready when none ever
        was. Voices of a language no worker can speak are left out."""
        health = await self.health()
        notices = health.ready
        if not notices:
            with store_trouble("reading the voices last known"):
                kept = await known_voices(self._store)
            if kept is None:
                problem = health.unavailable()
                assert problem is not None
                raise problem
            notices = [kept]
        voices = self._voices(notices)
        return [v for v in voices.book.installed if voice_language(v) not in voices.unspeakable]

    async def latest_notice(self, worker_id: str) -> schema.WorkerNotice | None:
        """The last notice `worker_id` wrote (a heartbeat carries its readings), unless that
        says it stopped, or none."""
        with store_trouble("reading a worker's notices"):
            found = await casts.last_notice(self._store, worker_id)
        if found is None or found[1].kind == schema.STOPPED:
            return None
        return found[1]

    async def receipts(self, seq_num: int) -> tuple[list[schema.Receipt], int]:
        """The receipts of finished casts from `seq_num` on (a page of them), and the seq to
        read from next. Where the worker's window was trimmed past `seq_num` (or the stream
        emptied under it), they are read from the first one kept."""
        with store_trouble("reading the receipts"):
            while True:
                try:
                    batch = await self._store.read(schema.PROGRESS_DONE, seq_num)
                    break
                except SeqOutOfRange as exc:
                    seq_num = exc.first
        if not batch.records:
            return [], seq_num
        found = [schema.decode(r.body, schema.Receipt) for r in batch.records]
        return found, batch.records[-1].seq_num + 1

    async def sweep_forever(self, max_age_s: float) -> None:
        """Remove the casts nobody appended to for `max_age_s`, each with its streams
        (`speechd.casts.sweep_casts_forever`), until cancelled or the store closes."""
        await casts.sweep_casts_forever(self._store, max_age_s)

    def _voices(self, workers: Sequence[schema.WorkerNotice]) -> _Voices:
        """The voice book over the workers' voices, and the languages any of them cannot speak
        (any worker may take any job, so one that cannot speak a language rules it out)."""
        installed = tuple(sorted({v for w in workers for v in w.voices}))
        unspeakable = {k: v for w in workers for k, v in sorted(w.unspeakable.items())}
        key = (installed, tuple(sorted(unspeakable.items())))
        if self._book is None or self._book[0] != key:
            book = VoiceBook(
                list(installed), voice_map=self._voice_map, default_voice=self._default_voice
            )
            self._book = (key, _Voices(book, unspeakable))
        return self._book[1]

    async def resolve_voice(self, voice: str | None) -> tuple[str, str]:
        """The voice spec a cast asking for `voice` (None: the default) is made with, and its
        language."""
        resolved, lang, _ = await self._resolve_voice(voice)
        return resolved, lang

    async def _resolve_voice(self, voice: str | None) -> tuple[str, str, _Voices]:
        """The voice spec a cast asking for `voice` (None: the default) is made with, its
        language, and the voices it was resolved among."""
        voices = self._voices(await self.require_workers())
        resolved = voices.book.resolve(voice or self._default_voice)
        lang = voices.book.language(resolved)
        reason = voices.unspeakable.get(lang)
        if reason is not None:
            raise VoiceUnavailable(reason)
        return resolved, lang, voices

    # -- making casts -------------------------------------------------------------------

    async def check(
        self,
        request: CastRequest | LiveRequest,
        *,
        max_chars: int = MAX_CAST_CHARS,
        text_param: str = "input",
    ) -> CheckedRequest:
        """Every check a request to make a cast passes, in one place, before anything is
        written; `submit` and `LiveCasts.create` call it, and so may any door that wants to
        refuse a request before it answers.

        In order: the text (a cast's: `check_text`, at most `max_chars`; a live cast's first
        piece: `check_piece`; `text_param` names the field), the format, the speed, how the
        text is read (`input_format`: SSML for a cast only), the voice (resolved against the
        ready workers: `UnknownVoice`, `VoiceUnavailable` for a language no worker can speak,
        `Unavailable` or `ModelUnavailable` while none is ready), a cast's text as that voice
        would read it (`speechd.text.check_input`: a bad SSML document or pronunciation is
        refused here, not by the worker; so is an SSML `<voice>` naming no voice, resolved
        as the request's voice is, and text in a language no worker can speak, both on
        `input`), and room in the queue (`QueueFull`) for a cast that
        would join it: a live cast, a new cast, or a failed one this request makes again; an
        identical request joining a cast that exists takes no room. Reads the store, writes
        nothing.
        """
        if isinstance(request, LiveRequest):
            check_piece(request.text, param=text_param)
            text = request.text
        else:
            text = check_text(request.text, max_chars=max_chars, param=text_param)
        check_format(request.format)
        speed = check_speed(request.speed)
        reading = input_format(request, text)
        voice, lang, voices = await self._resolve_voice(request.voice)
        cast_id = None
        unsupported: tuple[str, ...] = ()
        if isinstance(request, CastRequest):
            ssml = reading == "ssml"
            check = functools.partial(
                check_input,
                text,
                lang=lang,
                ssml=ssml,
                speed=speed,
                voice=voice,
                voices=voices.named,
            )
            # Reading a long SSML document takes milliseconds: off the event loop.
            threaded = ssml and len(text) > _INLINE_CHECK
            found = await asyncio.to_thread(check) if threaded else check()
            unsupported = found.unsupported
            voices.speaks(found.languages)
            cast_id = casts.cast_id(
                self._secret,
                model=MODEL,
                voice=voice,
                speed=speed,
                format=request.format,
                text=text,
                input_format=reading,
                normalize=request.normalize,
                scope=request.scope,
                voices=found.voices,
            )
        if cast_id is None or await self._joins_line(cast_id):
            depth = await self.queue_depth()
            if depth >= self._max_queue:
                raise QueueFull(
                    f"The synthesis queue is full ({depth} casts waiting); try again shortly.",
                    retry_after=self._retry_after(depth),
                )
        return CheckedRequest(
            text,
            voice,
            speed,
            request.format,
            reading,
            request.normalize,
            cast_id,
            unsupported,
        )

    async def queue_depth(self) -> int:
        """Casts waiting in line or being made (see `QueueLine`): what `max_queue` limits."""
        with store_trouble("reading the queue"):
            return await self._line.depth()

    async def pending_casts(self, *, limit: int) -> list[str]:
        """Ids of the casts not known to be finished (waiting, being made, or not looked at
        yet), in line order, as far as `jobs` was read."""
        with store_trouble("reading the queue"):
            return await self._line.unfinished(limit=limit)

    async def submit(
        self, request: CastRequest, *, max_chars: int, text_param: str = "input"
    ) -> SubmittedCast:
        """Check `request` (`check`), then create its cast unless an identical one exists.
        Nothing is written to the store unless every check passes."""
        checked = await self.check(request, max_chars=max_chars, text_param=text_param)
        assert checked.id is not None  # a cast's id is its content address
        ssml = checked.input_format == "ssml"
        title = request.title or title_for(checked.text, ssml=ssml)
        recipe = checked.recipe(title=title, created_ms=self._now_ms())
        with store_trouble("submitting a cast"):
            submission = await casts.submit(
                self._store,
                checked.id,
                recipe,
                sample_rate=SAMPLE_RATE,
                at_once=request.at_once,
                clock=self._clock,
            )
        return SubmittedCast(checked.id, submission.created, recipe, checked.unsupported)

    async def _joins_line(self, cast_id: str) -> bool:
        # Every identical request asks this, so one read of the last record, not the head.
        stream = schema.cast_stream(cast_id)
        with store_trouble("reading a cast's tail"):
            tail = await self._store.check_tail(stream)
            if tail == 0:
                return True
            last = (await self._store.read(stream, tail - 1, max_records=1)).records
        return bool(last) and schema.event_of(last[0]) == schema.Event.ERROR

    def _retry_after(self, depth: int) -> int:
        # A cast takes seconds to render; suggest a wait that grows with the backlog.
        return min(60, max(1, math.ceil((depth - self._max_queue + 1) * 2)))

    # -- reading casts ------------------------------------------------------------------

    async def status(self, cast_id: str) -> casts.CastStatus:
        """Where the cast stands (a queued one: its place in line, and when it should start;
        one waiting for its first audio while the workers' model is given back: `loading`,
        and when the model should be held again); raises `CastNotFound`."""
        now_ms = self._now_ms()
        with store_trouble("reading a cast's status"):
            status = await casts.cast_status(self._store, checked_id(cast_id), now_ms=now_ms)
        queued = status.state == casts.CastState.QUEUED
        if not queued and not (
            status.state == casts.CastState.GENERATING and status.chunks_done == 0
        ):
            return status
        health = await self.health()
        waking = health.model in (schema.IDLE, schema.WAKING)
        if waking:
            wake_ms = health.wake_in_ms(now_ms)
            status = msgspec.structs.replace(
                status, state=casts.CastState.LOADING, starts_in_ms=wake_ms
            )
        if not queued:
            return status
        with store_trouble("reading the queue"):
            place = await self._line.place(cast_id, workers=[w.worker for w in health.ready])
        if place is None:
            return status
        starts = status.starts_in_ms
        if place.starts_in_s is not None and (starts is not None or not waking):
            starts = (starts or 0) + round(place.starts_in_s * 1000)
        return msgspec.structs.replace(status, queue_position=place.ahead, starts_in_ms=starts)


class _Voices(NamedTuple):
    book: VoiceBook
    unspeakable: dict[str, str]

    def named(self, name: str) -> tuple[str, str]:
        """The spec and language code of a voice an SSML `<voice>` names (UnknownVoice), as
        a request's `voice` is resolved, and bounded as one is (`MAX_VOICE_CHARS`)."""
        if len(name) > MAX_VOICE_CHARS:
            raise InvalidRequest(f"A voice name is at most {MAX_VOICE_CHARS} characters.")
        spec = self.book.resolve(name)
        return spec, self.book.language(spec)

    def speaks(self, languages: Sequence[str]) -> None:
        """VoiceUnavailable (on `input`) for the first of an SSML document's `languages`
        (the G2Ps its text is read with: `xml:lang`, a `<voice>`'s) no worker can speak:
        one whose G2P a worker lacks, or one no installed voice speaks (the workers check
        the G2Ps of their voices' languages only; the two Englishes share theirs)."""
        spoken = {self.book.language(v) for v in self.book.installed}
        if spoken & {"a", "b"}:
            spoken |= {"a", "b"}
        for lang in languages:
            reason = self.unspeakable.get(lang)
            if reason is None and lang not in spoken:
                reason = f"no {LANGUAGES[lang]} voice is installed here."
            if reason is not None:
                refused = VoiceUnavailable(f"The SSML reads text in {LANGUAGES[lang]}: {reason}")
                refused.param = "input"
                raise refused
