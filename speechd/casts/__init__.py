"""Casts: what every reader and writer of the store agrees on.

* ids (`_ids`, `_books`): a cast's content address (`cast_id`) and a book's (`book_id`),
  keyed with the deployment secret; a book's stream and records are in `schema`;
* submitting (`_submit`): the claims that make one cast and one job (`submit`);
* reading (`_playable`, `_reader`): the playable sequence, one rule for every reader
  (`read_head`, `playable_spans`, `kept_spans`, `resume_point`), a cast's status, audio and
  events (`cast_status`, `cast_audio`, `follow_cast`, `playable_chunks`);
* words (`_captions`, `_words`): each record's timed words and the whole cast's, learnt a
  record at a time (`CastWords`, `cast_captions`);
* a finished cast's file (`_file`): laid out from its headers, read a few records at a time
  (`lay_out`, `CastFile`, `file_bytes`, `wait_ended`);
* retention (`_retention`): a cast's streams swept together (`sweep_casts_forever`);
* live input (`_input`): a live cast's pieces and their rules (`append_input`, ...);
* workers and the line (`_health`, `_queue`): worker notices and health, the voices last
  known, the line of waiting casts (`QueueLine`), read from the store alone.

The store's schema (stream names, record shapes, codecs, header names, notice states) is the
public module `speechd.casts.schema`; tests reach the rest through the private modules.
"""

from __future__ import annotations

from . import schema
from ._books import book_id
from ._captions import CastCaptions, CastWord, record_words
from ._file import CastFile, file_bytes, lay_out, wait_ended
from ._health import (
    WorkerHealth,
    known_voices,
    last_notice,
    ready_workers,
    remember_voices,
    worker_alive,
    worker_health,
)
from ._ids import cast_id, deployment_secret, is_cast_id
from ._input import (
    InputState,
    append_input,
    close_input,
    idle_expired,
    read_input_state,
)
from ._playable import CastHead, kept_spans, playable_spans, read_head, resume_point
from ._queue import QueueLine, committed_offset
from ._reader import CastState, CastStatus, cast_audio, cast_status, follow_cast, playable_chunks
from ._retention import sweep_casts_forever
from ._submit import submit
from ._words import CastWords

__all__ = [
    "CastCaptions",
    "CastFile",
    "CastHead",
    "CastState",
    "CastStatus",
    "CastWord",
    "CastWords",
    "InputState",
    "QueueLine",
    "WorkerHealth",
    "append_input",
    "book_id",
    "cast_audio",
    "cast_id",
    "cast_status",
    "close_input",
    "committed_offset",
    "deployment_secret",
    "file_bytes",
    "follow_cast",
    "idle_expired",
    "is_cast_id",
    "kept_spans",
    "known_voices",
    "last_notice",
    "lay_out",
    "playable_chunks",
    "playable_spans",
    "read_head",
    "read_input_state",
    "ready_workers",
    "record_words",
    "remember_voices",
    "resume_point",
    "schema",
    "submit",
    "sweep_casts_forever",
    "wait_ended",
    "worker_alive",
    "worker_health",
]
