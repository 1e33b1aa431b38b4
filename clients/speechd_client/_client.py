"""`Client` (blocking) and `AsyncClient`: the same methods, one over `httpx.Client`, one over
`httpx.AsyncClient`. Requests and decoding live in `_calls`; this module only sends.

    with Client("http://127.0.0.1:8000") as client:
        with client.speech("Hello.", voice="af_heart") as audio:
            print(audio.cast_url)
            for data in audio:          # the bytes as the server streams them
                out.write(data)
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator

import httpx

from . import _calls as calls
from ._calls import DEFAULT_TIMEOUT, Call
from ._errors import error_from_response, transport_errors
from ._live import AsyncLiveCast, LiveCast
from ._wire import (
    AudioFormat,
    BookView,
    CastCreated,
    CastRecord,
    CastView,
    InputAccepted,
    RecordsPage,
    Start,
    Voice,
)

__all__ = ["AsyncAudioStream", "AsyncClient", "AudioStream", "Client"]

_LONG_POLL_S = 25.0


class _Audio:
    """What an audio response says about itself."""

    def __init__(self, response: httpx.Response, url: str) -> None:
        self._response = response
        self._url = url
        self.cast_id: str | None = response.headers.get("x-cast-id")
        """The cast the audio belongs to (replay it, follow it, share it)."""
        self.cast_url: str | None = response.headers.get("x-cast-url")
        """The cast's player page; absent on `follow` (use `cast_status(...).url`)."""
        self.content_type: str = response.headers.get("content-type", "")
        delay = response.headers.get("x-cast-start-delay")
        self.start_delay: float = _seconds(delay)
        """Seconds the server holds the audio back so that it plays without a stall (a device
        slower than real time; 0: it comes at once). See `speech(start=...)`."""


def _seconds(value: str | None) -> float:
    try:
        return max(float(value), 0.0) if value else 0.0
    except ValueError:
        return 0.0


class AudioStream(_Audio):
    """An audio response being received; iterate it for the bytes as they arrive.

    The bytes form one file of the requested format once iteration ends normally; a response
    cut short raises `StreamInterrupted` instead of ending quietly."""

    def __iter__(self) -> Iterator[bytes]:
        with transport_errors(self._url, streaming=True):
            yield from self._response.iter_bytes()


class AsyncAudioStream(_Audio):
    """`AudioStream` for `AsyncClient`: iterate it with `async for`."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with transport_errors(self._url, streaming=True):
            async for data in self._response.aiter_bytes():
                yield data


class _Base:
    def __init__(self, base_url: str | None, api_key: str | None, timeout: float) -> None:
        self.base_url = calls.base_url_from(base_url)
        """The server's root (without `/v1`)."""
        self.api_key = api_key if api_key is not None else os.environ.get("SPEECHD_API_KEY")
        self.timeout = timeout
        self._headers = calls.headers_for(self.api_key)


class Client(_Base):
    """A blocking speechd client.

    `base_url`: the server (default $SPEECHD_URL, else http://127.0.0.1:8000; a trailing /v1
    is fine). `api_key`: default $SPEECHD_API_KEY. `timeout`: seconds to wait for each answer
    or streamed piece. `transport`: an httpx transport (tests, proxies)."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, api_key, timeout)
        self._http = httpx.Client(
            base_url=self.base_url, headers=self._headers, transport=transport
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: Call, *, stream: bool = False) -> httpx.Response:
        request = self._http.build_request(
            call.method,
            call.path,
            json=call.json,
            content=call.content,
            params=call.params,
            headers=call.headers,
            timeout=calls.timeout_for(call, self.timeout),
        )
        with transport_errors(self.base_url):
            response = self._http.send(request, stream=stream)
            if response.is_error:
                try:
                    response.read()
                finally:
                    response.close()
        if response.is_error:
            raise error_from_response(response)
        return response

    @contextlib.contextmanager
    def _audio(self, call: Call) -> Iterator[AudioStream]:
        response = self._send(call, stream=True)
        try:
            yield AudioStream(response, self.base_url)
        finally:
            response.close()

    def speech(
        self,
        input: str,
        *,
        voice: str | None = None,
        model: str | None = None,
        speed: float | None = None,
        response_format: AudioFormat | None = None,
        start: Start | None = None,
    ) -> contextlib.AbstractContextManager[AudioStream]:
        """`POST /v1/audio/speech`: a context manager giving the audio as it is generated.
        Unset fields take the server's defaults (mp3, speed 1, its default voice). `start`:
        "smooth" lets the server hold the audio back until it can play through without a
        stall (on a device slower than real time; `AudioStream.start_delay` says how long),
        "now" asks for the first audio at once; the server's default when unset."""
        call = calls.speech(
            input,
            voice=voice,
            model=model,
            speed=speed,
            response_format=response_format,
            start=start,
        )
        return self._audio(call)

    def submit_cast(
        self,
        input: str,
        *,
        voice: str | None = None,
        model: str | None = None,
        speed: float | None = None,
        response_format: AudioFormat | None = None,
        title: str | None = None,
    ) -> CastCreated:
        """`POST /v1/casts`: queue a cast (texts far longer than `speech` takes); returns at
        once with its id and link. The same request twice is the same cast."""
        call = calls.submit_cast(
            input,
            voice=voice,
            model=model,
            speed=speed,
            response_format=response_format,
            title=title,
        )
        return calls.cast_created(self._send(call))

    def live_cast(
        self,
        input: str = "",
        *,
        voice: str | None = None,
        model: str | None = None,
        speed: float | None = None,
        response_format: AudioFormat | None = None,
        title: str | None = None,
    ) -> LiveCast:
        """`POST /v1/casts` with `live`: a cast whose text you write as it comes
        (`append`, then `done`; leaving a `with` block says `done`). `input`: a first piece."""
        call = calls.live_cast(
            input,
            voice=voice,
            model=model,
            speed=speed,
            response_format=response_format,
            title=title,
        )
        cast = LiveCast(calls.live_cast_created(self._send(call)), self._input)
        if input:
            cast.seq, cast.chars = 1, len(input)
        return cast

    def _input(self, call: Call) -> InputAccepted:
        return calls.input_accepted(self._send(call))

    def cast_status(self, cast_id: str) -> CastView:
        """`GET /v1/casts/{id}`: the cast's state and progress."""
        return calls.cast_view(self._send(calls.cast_status(cast_id)))

    def follow(self, cast_id: str) -> contextlib.AbstractContextManager[AudioStream]:
        """`GET /v1/casts/{id}/audio`: the cast's audio as one file, live while it is being
        generated (from its start, whenever you join)."""
        return self._audio(calls.cast_audio(cast_id))

    def captions(self, cast_id: str, *, format: str = "vtt") -> str:
        """`GET /v1/casts/{id}/captions.vtt` (or `.srt`): the cast's words as a subtitle
        file, timed to its audio; a cast still generating gives the words made so far."""
        return calls.captions_of(self._send(calls.captions(cast_id, format)))

    def records(
        self,
        cast_id: str,
        *,
        seq_num: int = 0,
        wait: float = 0.0,
        max_records: int | None = None,
    ) -> RecordsPage:
        """`GET /v1/casts/{id}/records`: records from `seq_num`; at the tail the server holds
        the answer up to `wait` seconds for new ones."""
        call = calls.records(cast_id, seq_num=seq_num, wait=wait, max_records=max_records)
        return calls.records_of(self._send(call))

    def follow_records(self, cast_id: str, *, seq_num: int = 0) -> Iterator[CastRecord]:
        """Every record from `seq_num`, live (long-polling), through the final eos or error."""
        while True:
            page = self.records(cast_id, seq_num=seq_num, wait=_LONG_POLL_S)
            for record in page.records:
                yield record
                if record.terminal:
                    return
                seq_num = record.seq_num + 1

    def create_book(
        self,
        data: bytes,
        content_type: str,
        *,
        voice: str | None = None,
        speed: float | None = None,
        format: str | None = None,
        chapters: str | None = None,
        chapter_voices: str | None = None,
        chapter_speeds: str | None = None,
    ) -> BookView:
        """Make a book of `data` (an EPUB, Markdown or plain text: `content_type`), or find
        the one the same upload made; `chapters` like "3-5" (from 1; default all);
        `chapter_voices` like "2=am_adam,5-7=bf_emma" and `chapter_speeds` like "2=1.2": the
        chapters read in a voice or at a speed of their own."""
        call = calls.create_book(
            data,
            content_type,
            voice=voice,
            speed=speed,
            format=format,
            chapters=chapters,
            chapter_voices=chapter_voices,
            chapter_speeds=chapter_speeds,
        )
        return calls.book_view(self._send(call))

    def book_status(self, book_id: str) -> BookView:
        return calls.book_view(self._send(calls.book_status(book_id)))

    def book_audio(
        self, book_id: str, format: str = "m4b"
    ) -> contextlib.AbstractContextManager[AudioStream]:
        """A finished book's whole file (m4b or mp3, the book's own)."""
        return self._audio(calls.book_audio(book_id, format))

    def voices(self) -> list[Voice]:
        """`GET /v1/audio/voices`: the voices the ready workers have."""
        return calls.voices_of(self._send(calls.voices()))


class AsyncClient(_Base):
    """`Client` for asyncio: the same methods, awaited; `speech` and `follow` are async
    context managers giving an `AsyncAudioStream`."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, api_key, timeout)
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=self._headers, transport=transport
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, call: Call, *, stream: bool = False) -> httpx.Response:
        request = self._http.build_request(
            call.method,
            call.path,
            json=call.json,
            content=call.content,
            params=call.params,
            headers=call.headers,
            timeout=calls.timeout_for(call, self.timeout),
        )
        with transport_errors(self.base_url):
            response = await self._http.send(request, stream=stream)
            if response.is_error:
                try:
                    await response.aread()
                finally:
                    await response.aclose()
        if response.is_error:
            raise error_from_response(response)
        return response

    @contextlib.asynccontextmanager
    async def _audio(self, call: Call) -> AsyncIterator[AsyncAudioStream]:
        response = await self._send(call, stream=True)
        try:
            yield AsyncAudioStream(response, self.base_url)
        finally:
            await response.aclose()

    def speech(
        self,
        input: str,
        *,
        voice: str | None = None,
        model: str | None = None,
        speed: float | None = None,
        response_format: AudioFormat | None = None,
        start: Start | None = None,
    ) -> contextlib.AbstractAsyncContextManager[AsyncAudioStream]:
        call = calls.speech(
            input,
            voice=voice,
            model=model,
            speed=speed,
            response_format=response_format,
            start=start,
        )
        return self._audio(call)

    async def submit_cast(
        self,
        input: str,
        *,
        voice: str | None = None,
        model: str | None = None,
        speed: float | None = None,
        response_format: AudioFormat | None = None,
        title: str | None = None,
    ) -> CastCreated:
        call = calls.submit_cast(
            input,
            voice=voice,
            model=model,
            speed=speed,
            response_format=response_format,
            title=title,
        )
        return calls.cast_created(await self._send(call))

    async def live_cast(
        self,
        input: str = "",
        *,
        voice: str | None = None,
        model: str | None = None,
        speed: float | None = None,
        response_format: AudioFormat | None = None,
        title: str | None = None,
    ) -> AsyncLiveCast:
        call = calls.live_cast(
            input,
            voice=voice,
            model=model,
            speed=speed,
            response_format=response_format,
            title=title,
        )
        cast = AsyncLiveCast(calls.live_cast_created(await self._send(call)), self._input)
        if input:
            cast.seq, cast.chars = 1, len(input)
        return cast

    async def _input(self, call: Call) -> InputAccepted:
        return calls.input_accepted(await self._send(call))

    async def cast_status(self, cast_id: str) -> CastView:
        return calls.cast_view(await self._send(calls.cast_status(cast_id)))

    def follow(self, cast_id: str) -> contextlib.AbstractAsyncContextManager[AsyncAudioStream]:
        return self._audio(calls.cast_audio(cast_id))

    async def captions(self, cast_id: str, *, format: str = "vtt") -> str:
        return calls.captions_of(await self._send(calls.captions(cast_id, format)))

    async def records(
        self,
        cast_id: str,
        *,
        seq_num: int = 0,
        wait: float = 0.0,
        max_records: int | None = None,
    ) -> RecordsPage:
        call = calls.records(cast_id, seq_num=seq_num, wait=wait, max_records=max_records)
        return calls.records_of(await self._send(call))

    async def follow_records(self, cast_id: str, *, seq_num: int = 0) -> AsyncIterator[CastRecord]:
        while True:
            page = await self.records(cast_id, seq_num=seq_num, wait=_LONG_POLL_S)
            for record in page.records:
                yield record
                if record.terminal:
                    return
                seq_num = record.seq_num + 1

    async def create_book(
        self,
        data: bytes,
        content_type: str,
        *,
        voice: str | None = None,
        speed: float | None = None,
        format: str | None = None,
        chapters: str | None = None,
        chapter_voices: str | None = None,
        chapter_speeds: str | None = None,
    ) -> BookView:
        call = calls.create_book(
            data,
            content_type,
            voice=voice,
            speed=speed,
            format=format,
            chapters=chapters,
            chapter_voices=chapter_voices,
            chapter_speeds=chapter_speeds,
        )
        return calls.book_view(await self._send(call))

    async def book_status(self, book_id: str) -> BookView:
        return calls.book_view(await self._send(calls.book_status(book_id)))

    def book_audio(
        self, book_id: str, format: str = "m4b"
    ) -> contextlib.AbstractAsyncContextManager[AsyncAudioStream]:
        return self._audio(calls.book_audio(book_id, format))

    async def voices(self) -> list[Voice]:
        return calls.voices_of(await self._send(calls.voices()))
