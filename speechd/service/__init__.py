"""The cast service, HTTP-free: what every door (the HTTP api, the Wyoming server) calls to
make and read casts.

* `CastService` (`_casts`): `check` a request (text, format, speed, voice, queue: every
  check, in one place), `submit` a `CastRequest` (checked, then claimed: a `SubmittedCast`),
  read a cast's status (its place in line), the workers' health, voices, latest notices and
  receipts, and sweep old casts away.
* `CastReader` (`_reader`, the service's `reader`): everything a door reads of a cast: its
  meta, its records from a seq (`CastRecord`s: public headers only) with a long poll, its
  audio, its playable records with their words, its captions, a finished cast's whole file.
* `LiveCasts` (`_live`): live casts, whose text arrives over time
  (`docs/design/index.md#serving-a-cast`): make one (`LiveRequest`, checked by the same
  `check`, -> `LiveCast`: a random id and an input token), append the pieces of its input to
  `input/<id>` (`speechd.casts` holds the layout and the rules) and follow its audio.
* `cast_url`, `cast_api_url`, `input_url` (`_links`): the links every door hands out.
* `BookService` (`_books`): books (`BookRequest`: an EPUB, Markdown or plain-text upload)
  made as ordered chapter casts in the background; a book's status (`BookStatus`), cancel,
  and a chapter opened by a listener.
* `open_services` (`_open`): the three, built from the settings over a store, as every door
  opens them (`OpenStore`: a store a door is handed, to pass on to it).
* `Watch` (`_watch`): what a door's reads of a cast race (the workers' health, the door's own
  stops), so that its caller never waits in vain.
* `_requests`: the request shapes, their bounds (`MAX_PIECE_CHARS`, `MAX_PIECES`,
  `MAX_TOKEN_CHARS`; `MAX_LIVE_CHARS` in all) and the checks that read nothing but the
  request.

The service is the one door to the store (`docs/design/index.md#one-door-to-the-store`): the
doors (`speechd.api`, `speechd.wyoming`) never import `speechd.durable` nor the parts of
`speechd.casts` that read streams (tests/test_layout.py checks it). Every store failure under
a method here is `StoreUnavailable`, logged once (`_trouble`). Nothing here imports the web
framework, the worker or torch.
"""

from __future__ import annotations

from ._books import BookRequest, BookService, BookStatus
from ._casts import CastService, SubmittedCast, voice_label
from ._links import cast_api_url, cast_url, input_url
from ._live import LiveCast, LiveCasts
from ._open import OpenStore, open_services
from ._reader import CastReader, CastRecord
from ._requests import (
    MAX_PIECE_CHARS,
    MAX_PIECES,
    MAX_TOKEN_CHARS,
    MODEL,
    CastRequest,
    LiveRequest,
)
from ._watch import Watch

__all__ = [
    "MAX_PIECES",
    "MAX_PIECE_CHARS",
    "MAX_TOKEN_CHARS",
    "MODEL",
    "BookRequest",
    "BookService",
    "BookStatus",
    "CastReader",
    "CastRecord",
    "CastRequest",
    "CastService",
    "LiveCast",
    "LiveCasts",
    "LiveRequest",
    "OpenStore",
    "SubmittedCast",
    "Watch",
    "cast_api_url",
    "cast_url",
    "input_url",
    "open_services",
    "voice_label",
]
