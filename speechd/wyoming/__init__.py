"""Home Assistant's door: speechd speaks the Wyoming protocol (issue 28, DESIGN.md §7).

`speechd serve --wyoming-uri tcp://0.0.0.0:10200` runs it beside the HTTP api (sharing the
api's stream caps); `speechd wyoming --store ... --wyoming-uri ...` runs it apart against a
shared store. A `synthesize` is a cast, a streamed synthesis (`synthesize-start`, chunks,
`synthesize-stop`) a live cast; `describe` lists Kokoro-82M's voices and the deployment's
aliases. The `wyoming` package (its events and their framing) speaks the protocol; this
package listens and decides who may connect (`_door`), what each event does (`_session`),
bounds it (`_bounds`) and never loads the model.
"""

from __future__ import annotations

from ._bounds import (
    AFTER_ERROR_IDLE_S,
    AUDIO_CHUNK_SAMPLES,
    IDLE_S,
    MAX_HEADER_BYTES,
    MAX_PART_BYTES,
    MAX_SYNTHESIZE_CHARS,
    SEND_TIMEOUT_S,
)
from ._command import run_wyoming
from ._door import WyomingDoor, stream_slots, wyoming_door
from ._info import LANGUAGE_TAGS, PROGRAM, describe
from ._zeroconf import SERVICE_TYPE

__all__ = [
    "AFTER_ERROR_IDLE_S",
    "AUDIO_CHUNK_SAMPLES",
    "IDLE_S",
    "LANGUAGE_TAGS",
    "MAX_HEADER_BYTES",
    "MAX_PART_BYTES",
    "MAX_SYNTHESIZE_CHARS",
    "PROGRAM",
    "SEND_TIMEOUT_S",
    "SERVICE_TYPE",
    "WyomingDoor",
    "describe",
    "run_wyoming",
    "stream_slots",
    "wyoming_door",
]

WyomingDoor.__module__ = __name__
