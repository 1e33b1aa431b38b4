"""Every request limit of the api, named once.

Each is checked before anything costly runs (decoding aside, which is linear and capped by
the body limit): field lengths by the wire shapes' `msgspec.Meta`, headers and blends by the
code that reads them, before any pattern or parse. The manual's limits page
(docs/operations/limits.md) lists them per route; `tests/api/gateway/test_hostile_bounds.py` and
`tests/api/openai_compat/test_live_limits.py` check that list against these values.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "MAX_BLEND_VOICES",
    "MAX_CAST_BODY_BYTES",
    "MAX_CAST_CHARS",
    "MAX_CLIENT_KEY_CHARS",
    "MAX_EVENT_ID_CHARS",
    "MAX_IF_HEADER_CHARS",
    "MAX_INPUT_CHARS",
    "MAX_NAME_CHARS",
    "MAX_RANGE_CHARS",
    "MAX_READ_RECORDS",
    "MAX_SEQ_NUM",
    "MAX_TITLE_CHARS",
    "MAX_VOICE_CHARS",
    "MAX_WAIT_S",
    "SSE_BUFFER_BYTES",
    "STREAM_RETRY_AFTER_S",
]

# -- text and names ------------------------------------------------------------------------

MAX_INPUT_CHARS: Final = 4096
"""`POST /v1/audio/speech`: the longest `input` (and `instructions`), OpenAI's own limit."""

MAX_CAST_CHARS: Final = 200_000
"""`POST /v1/casts`: the longest `input`."""

MAX_CAST_BODY_BYTES: Final = 12 * MAX_CAST_CHARS + 64 * 1024
"""`POST /v1/casts`'s body limit, above the app's: room for the longest text even when every
character is JSON-escaped as a surrogate pair (`\\ud83d\\ude00`, 12 bytes), as clients that
escape all non-ASCII send it, plus the other fields."""

MAX_VOICE_CHARS: Final = 256
"""A voice, everywhere: a name, an alias, a blend (`af_bella(2)+af_sky(1)`) or `{"id"}`."""

MAX_BLEND_VOICES: Final = 8
"""Voices in one blend (each is a 0.5 MB tensor the worker averages); counted before parsing."""

MAX_NAME_CHARS: Final = 256
"""A model name (in a body or in `/v1/models/{id}`)."""

MAX_TITLE_CHARS: Final = 200
"""A cast's title."""

# -- the public read path ------------------------------------------------------------------

MAX_SEQ_NUM: Final = 2**53 - 1
"""`?seq_num=`: the largest record number a reader may name (JSON's exact integers)."""

MAX_READ_RECORDS: Final = 1000
"""`?max_records=`: the most records one records read may ask for (the gateway's own
`max_records` setting, 100 by default, caps what it returns)."""

MAX_WAIT_S: Final = 30.0
"""`?wait=`: the longest long-poll (a longer wait is cut to this)."""

MAX_RANGE_CHARS: Final = 128
"""A `Range` header longer than this is not a single byte range: the whole file is sent."""

MAX_IF_HEADER_CHARS: Final = 1024
"""`If-None-Match` / `If-Range` longer than this match nothing."""

MAX_EVENT_ID_CHARS: Final = 20
"""`Last-Event-ID`: a record number, at most 20 digits."""

MAX_CLIENT_KEY_CHARS: Final = 64
"""How much of a proxy's client address is kept as the client's key (an IPv6 address with a
zone fits); longer values are cut, so no header can grow the per-client tables."""

# -- long-lived reads ----------------------------------------------------------------------

SSE_BUFFER_BYTES: Final = 4 * 1024 * 1024
"""Bytes of frames a live SSE listener may fall behind before it is disconnected (a frame
that arrives while its queue is empty is always taken, whatever its size)."""

STREAM_RETRY_AFTER_S: Final = 5
"""`Retry-After` past a stream cap: long-lived reads end in seconds to minutes."""
