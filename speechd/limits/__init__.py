"""What a request may cost: every limit, the client key they count by, and the caps on
long-lived reads.

* `_bounds`: every request limit as a named constant (field lengths, blend size, headers,
  long-polls, SSE buffers); configurable caps are `speechd.config.Settings` flags.
* `ClientAddress`: the per-client key, from the peer or the right end of a trusted proxy's
  header (`--client-header`, `--trusted-proxies`).
* `StreamSlots`: concurrent long-lived reads, capped per client (429) and in total (503).

Import-light (no framework, no torch), so the engine's blend parser can use the same limits.
"""

from __future__ import annotations

from ._bounds import (
    MAX_BLEND_VOICES,
    MAX_CAST_BODY_BYTES,
    MAX_CAST_CHARS,
    MAX_CLIENT_KEY_CHARS,
    MAX_EVENT_ID_CHARS,
    MAX_IF_HEADER_CHARS,
    MAX_INPUT_CHARS,
    MAX_NAME_CHARS,
    MAX_RANGE_CHARS,
    MAX_READ_RECORDS,
    MAX_SEQ_NUM,
    MAX_TITLE_CHARS,
    MAX_VOICE_CHARS,
    MAX_WAIT_S,
    SSE_BUFFER_BYTES,
    STREAM_RETRY_AFTER_S,
)
from ._clients import ClientAddress
from ._slots import Slot, StreamSlots, hold, release_slots

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
    "ClientAddress",
    "Slot",
    "StreamSlots",
    "hold",
    "release_slots",
]

for _name in ("ClientAddress", "Slot", "StreamSlots"):
    globals()[_name].__module__ = __name__
del _name
