"""The cast service, HTTP-free: what every door (the HTTP api, the Wyoming server) calls to
make and read casts.

* `CastService` (`_casts`): `check` a request (text, format, speed, voice, queue: every
  check, in one place), `submit` a `CastRequest` (checked, then claimed: a `SubmittedCast`),
  read a cast's status and audio, the workers' health and voices.
* `LiveCasts` (`_live`): live casts, whose text arrives over time (issue 16, DESIGN.md §6):
  make one (`LiveRequest`, checked by the same `check`, -> `LiveCast`: a random id and an
  input token), append the pieces of its input to `input/<id>` (`speechd.casts` holds the
  layout and the rules) and follow its audio.
* `cast_url`, `cast_api_url`, `input_url` (`_links`): the links every door hands out.
* `open_services` (`_open`): the two, built from the settings over a store, as every door
  opens them.
* `Watch` (`_watch`): what a door's reads of a cast race (the workers' health, the door's own
  stops), so that its caller never waits in vain.
* `_requests`: the request shapes, their bounds (`MAX_PIECE_CHARS`, `MAX_PIECES`,
  `MAX_TOKEN_CHARS`; `MAX_LIVE_CHARS` in all) and the checks that read nothing but the
  request.

Nothing here imports the web framework, the worker or torch.
"""

from __future__ import annotations

from ._casts import MODEL, CastService, SubmittedCast, voice_label
from ._links import cast_api_url, cast_url, input_url
from ._live import LiveCast, LiveCasts
from ._open import open_services
from ._requests import (
    MAX_PIECE_CHARS,
    MAX_PIECES,
    MAX_TOKEN_CHARS,
    CastRequest,
    LiveRequest,
)
from ._watch import Watch

__all__ = [
    "MAX_PIECES",
    "MAX_PIECE_CHARS",
    "MAX_TOKEN_CHARS",
    "MODEL",
    "CastRequest",
    "CastService",
    "LiveCast",
    "LiveCasts",
    "LiveRequest",
    "SubmittedCast",
    "Watch",
    "cast_api_url",
    "cast_url",
    "input_url",
    "open_services",
    "voice_label",
]
