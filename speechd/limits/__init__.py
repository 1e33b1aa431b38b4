"""What a request may cost: every limit, and the caps on long-lived reads.

* `_bounds`: every request limit as a named constant (field lengths, blend size, headers,
  long-polls, SSE buffers); configurable caps are `speechd.config.Settings` flags.
* `StreamSlots`: concurrent long-lived reads, capped per client (429) and in total (503); one
  counter that the doors (the HTTP api, the Wyoming server) share under `speechd serve`. Who
  the client is is each door's to say (the api's: `speechd.api`'s client address, from the
  peer or a trusted proxy's header).

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
)
from ._slots import Slot, StreamSlots

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
    "Slot",
    "StreamSlots",
]

for _name in ("Slot", "StreamSlots"):
    globals()[_name].__module__ = __name__
del _name
