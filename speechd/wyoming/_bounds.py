"""Every limit of the Wyoming door, named once, each checked before the work it bounds.

An event is a JSON header line, then `data_length` bytes of JSON and `payload_length` bytes of
payload (the `wyoming` package reads them). The line is bounded by the connection's stream
limit, the two parts by `MAX_PART_BYTES` before a byte of them is buffered; a text by the same
limit as the HTTP route it mirrors. Connections count against the api's stream caps
(`speechd.limits.StreamSlots`: `--max-client-streams` per client, `--max-streams` in all).
"""

from __future__ import annotations

from typing import Final

from speechd.limits import MAX_INPUT_CHARS, MAX_VOICE_CHARS

__all__ = [
    "AFTER_ERROR_IDLE_S",
    "AUDIO_CHUNK_SAMPLES",
    "CLOSE_S",
    "IDLE_S",
    "MAX_HEADER_BYTES",
    "MAX_PART_BYTES",
    "MAX_SYNTHESIZE_CHARS",
    "MAX_VOICE_CHARS",
    "SEND_TIMEOUT_S",
]

MAX_HEADER_BYTES: Final = 64 * 1024
"""An event's header line: asyncio's stream limit, which the `wyoming` servers read with (a
longer line ends the connection before it is buffered whole)."""

MAX_PART_BYTES: Final = 128 * 1024
"""An event's data or payload (`data_length`, `payload_length`): room for the longest text
even when every character is JSON-escaped as a surrogate pair (12 bytes), plus the voice and
context. A speech client sends no payload; a larger part ends the connection unread."""

MAX_SYNTHESIZE_CHARS: Final = MAX_INPUT_CHARS
"""A `synthesize` event's text: the same as `POST /v1/audio/speech`'s `input`. A streamed
text takes a live cast's limits (a piece per `synthesize-chunk`, the whole input in all)."""

IDLE_S: Final = 60.0
"""How long a connection may wait between events it sends (a dropped one mid-stream leaves
its cast to finish the text that came)."""

AFTER_ERROR_IDLE_S: Final = 5.0
"""How long a connection waits for its next event after an `error`: a client that goes on
sends it at once, and one that waits for audio (Home Assistant reads until `audio-stop` or
the socket closes) is let go in seconds."""

SEND_TIMEOUT_S: Final = 30.0
"""How long one event may wait for the client to read: past it the client is dropped (a
slow reader holds at most the socket's buffer and one event, never the cast's audio)."""

CLOSE_S: Final = 5.0
"""How long the replies under way get to end when the server stops: past it each gets an
`error` (and its `audio-stop`) and is closed; an idle connection is closed at once."""

AUDIO_CHUNK_SAMPLES: Final = 1024
"""Samples per `audio-chunk` event (43 ms at 24 kHz), as wyoming-piper sends them: a cast's
record is cut into these so a satellite can play as it receives."""
