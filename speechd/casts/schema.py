"""The store's schema, as its users outside `speechd.casts` need it
(`docs/design/index.md#the-contract-streams-and-records`): the streams' names, the records they
hold (msgspec Structs, the event a cast record carries, its documented header names), how a
record is encoded, decoded and written, and the states a worker's notice says.

    from speechd.casts import schema
    schema.cast_stream(cast_id)            # "pub/casts/<id>"
    schema.decode(record.body, schema.Job)

The rules that read and write these records (claims, the playable sequence, live input,
worker health, the line of waiting casts) are `speechd.casts`'s own surface. Every name here is
defined in one of the package's private modules (`_streams`, `_records`, `_input`,
`_health`), which document the layout; the header names not listed are read only inside the
package.
"""

from __future__ import annotations

from ._books import (
    H_BOOK_CAST,
    H_BOOK_ETAG,
    H_BOOK_SAMPLES,
    BookChapter,
    BookEvent,
    BookRecipe,
    CancelBook,
    book_event,
    chapters_of,
    frames_record,
    is_book_id,
    recipe_records,
)
from ._health import IDLE, LOADING, READY, STOPPED, UNAVAILABLE, WAKING
from ._input import InputEnd, input_event, piece_record
from ._records import (
    H_EVENT,
    AudioChunk,
    Cursor,
    DeadJob,
    Eos,
    Event,
    Failure,
    Job,
    Lease,
    Meta,
    Receipt,
    Recipe,
    RecordSpan,
    Start,
    Word,
    WorkerNotice,
    audio_record,
    decode,
    encode,
    eos_record,
    error_record,
    event_of,
    public_headers,
    start_record,
)
from ._streams import (
    CAST_PREFIX,
    CATALOG_PREFIX,
    JOBS,
    JOBS_CURSOR,
    JOBS_DEAD,
    LEASES_PREFIX,
    PROGRESS_DONE,
    WORKERS_PREFIX,
    book_stream,
    cast_stream,
    catalog_stream,
    input_stream,
    lease_stream,
    worker_stream,
)

__all__ = [
    "CAST_PREFIX",
    "CATALOG_PREFIX",
    "H_BOOK_CAST",
    "H_BOOK_ETAG",
    "H_BOOK_SAMPLES",
    "H_EVENT",
    "IDLE",
    "JOBS",
    "JOBS_CURSOR",
    "JOBS_DEAD",
    "LEASES_PREFIX",
    "LOADING",
    "PROGRESS_DONE",
    "READY",
    "STOPPED",
    "UNAVAILABLE",
    "WAKING",
    "WORKERS_PREFIX",
    "AudioChunk",
    "BookChapter",
    "BookEvent",
    "BookRecipe",
    "CancelBook",
    "Cursor",
    "DeadJob",
    "Eos",
    "Event",
    "Failure",
    "InputEnd",
    "Job",
    "Lease",
    "Meta",
    "Receipt",
    "Recipe",
    "RecordSpan",
    "Start",
    "Word",
    "WorkerNotice",
    "audio_record",
    "book_event",
    "book_stream",
    "cast_stream",
    "catalog_stream",
    "chapters_of",
    "decode",
    "encode",
    "eos_record",
    "error_record",
    "event_of",
    "frames_record",
    "input_event",
    "input_stream",
    "is_book_id",
    "lease_stream",
    "piece_record",
    "public_headers",
    "recipe_records",
    "start_record",
    "worker_stream",
]
