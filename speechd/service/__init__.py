"""The cast service, HTTP-free: what every door (the HTTP api, the Wyoming server) calls to
make and read casts.

* `CastService` (`_casts`): submit a `CastRequest` (checked, voice resolved against the ready
  workers, queue limit, claimed: a `SubmittedCast`), read a cast's status and audio, the
  workers' health and voices.
* `LiveCasts` (`_live`): live casts, whose text arrives over time (issue 16, DESIGN.md §6):
  make one (`LiveRequest` -> `LiveCast`, a random id and an input token), append the pieces of
  its input to `input/<id>` (`speechd.casts` holds the layout and the rules) and follow its
  audio.

Nothing here imports the web framework, the worker or torch.
"""

from __future__ import annotations

from ._casts import (
    MODEL,
    UNREADY_GRACE_S,
    CastRequest,
    CastService,
    SubmittedCast,
    derive_title,
    voice_label,
)
from ._live import (
    DEFAULT_IDLE_S,
    MAX_LIVE_CHARS,
    MAX_PIECE_CHARS,
    MAX_PIECES,
    MAX_TOKEN_CHARS,
    LiveCast,
    LiveCasts,
    LiveRequest,
    bearer_token,
    check_piece,
)

__all__ = [
    "DEFAULT_IDLE_S",
    "MAX_LIVE_CHARS",
    "MAX_PIECES",
    "MAX_PIECE_CHARS",
    "MAX_TOKEN_CHARS",
    "MODEL",
    "UNREADY_GRACE_S",
    "CastRequest",
    "CastService",
    "LiveCast",
    "LiveCasts",
    "LiveRequest",
    "SubmittedCast",
    "bearer_token",
    "check_piece",
    "derive_title",
    "voice_label",
]
