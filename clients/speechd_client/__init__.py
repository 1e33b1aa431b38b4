"""speechd_client: a small client for speechd, the OpenAI-compatible Kokoro speech server.

    from speechd_client import Client

    with Client("http://127.0.0.1:8000") as client:           # or $SPEECHD_URL
        with client.speech("Hello from speechd.", voice="af_heart") as audio:
            with open("hello.mp3", "wb") as out:
                for data in audio:                             # streamed as it is made
                    out.write(data)
        cast = client.submit_cast(open("chapter.txt").read())  # queued; returns at once
        print(cast.url, client.cast_status(cast.id).progress)
        print(client.captions(cast.id))                        # WebVTT, timed to the audio
        book = client.create_book(open("novel.epub", "rb").read(), "application/epub+zip")
        print(client.book_status(book.id).progress)            # made in the background
        with client.live_cast(voice="af_heart") as live:      # text that arrives over time
            for token in llm_reply():
                live.append(token)                             # spoken as it comes

`AsyncClient` has the same methods for asyncio. Errors are one tree under
`SpeechdClientError` (see `_errors`). The `speechd-client` command is `speechd_client._cli`.
Needs only httpx and msgspec: never the server, never torch.
"""

from __future__ import annotations

from ._calls import CAPTION_FORMATS, DEFAULT_TIMEOUT, DEFAULT_URL, MAX_SPEECH_CHARS
from ._client import AsyncAudioStream, AsyncClient, AudioStream, Client
from ._errors import (
    APIError,
    AuthenticationError,
    BadRequest,
    CastFailed,
    CastNotFound,
    Conflict,
    InputClosed,
    NotFound,
    RateLimited,
    ServerError,
    ServerUnreachable,
    SpeechdClientError,
    StreamInterrupted,
    Timeout,
    TransportError,
    Unavailable,
    UnexpectedResponse,
    UnknownVoice,
)
from ._live import AsyncLiveCast, LiveCast
from ._version import __version__ as __version__
from ._wire import (
    FORMATS,
    AudioFormat,
    BookChapter,
    BookView,
    CastCreated,
    CastRecord,
    CastView,
    InputAccepted,
    LiveCastCreated,
    Progress,
    RecordsPage,
    Start,
    Voice,
)

__all__ = [
    "CAPTION_FORMATS",
    "DEFAULT_TIMEOUT",
    "DEFAULT_URL",
    "FORMATS",
    "MAX_SPEECH_CHARS",
    "APIError",
    "AsyncAudioStream",
    "AsyncClient",
    "AsyncLiveCast",
    "AudioFormat",
    "AudioStream",
    "AuthenticationError",
    "BadRequest",
    "BookChapter",
    "BookView",
    "CastCreated",
    "CastFailed",
    "CastNotFound",
    "CastRecord",
    "CastView",
    "Client",
    "Conflict",
    "InputAccepted",
    "InputClosed",
    "LiveCast",
    "LiveCastCreated",
    "NotFound",
    "Progress",
    "RateLimited",
    "RecordsPage",
    "ServerError",
    "ServerUnreachable",
    "SpeechdClientError",
    "Start",
    "StreamInterrupted",
    "Timeout",
    "TransportError",
    "Unavailable",
    "UnexpectedResponse",
    "UnknownVoice",
    "Voice",
]

for _name in __all__:
    _value = globals()[_name]
    if getattr(_value, "__module__", "").startswith("speechd_client._"):
        _value.__module__ = __name__
