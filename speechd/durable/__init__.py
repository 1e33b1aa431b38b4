"""The durable stream store: the one contract every other part of speechd stands on.

`open_store(url)` picks a backend from the URL: a filesystem path (or `file:` URL) opens the
embedded store in that data folder; `nats://host:port` the NATS JetStream backend.
"""

from __future__ import annotations

from ._contract import (
    MAX_BATCH_BYTES,
    MAX_BATCH_RECORDS,
    MAX_BODY_BYTES,
    MAX_HEADER_BYTES,
    AppendAck,
    AppendRecord,
    DurableError,
    Limits,
    ReadBatch,
    Record,
    RecordTooLarge,
    SeqMismatch,
    SeqOutOfRange,
    Spare,
    Store,
    StreamInfo,
)
from ._embedded import EmbeddedStore
from ._retention import Retention, sweep_forever

__all__ = [
    "MAX_BATCH_BYTES",
    "MAX_BATCH_RECORDS",
    "MAX_BODY_BYTES",
    "MAX_HEADER_BYTES",
    "AppendAck",
    "AppendRecord",
    "DurableError",
    "EmbeddedStore",
    "Limits",
    "ReadBatch",
    "Record",
    "RecordTooLarge",
    "Retention",
    "SeqMismatch",
    "SeqOutOfRange",
    "Spare",
    "Store",
    "StreamInfo",
    "open_store",
    "sweep_forever",
]


async def open_store(url: str) -> Store:
    """Open the store at `url` (a data folder path, `file:PATH`, or `nats://host:port`)."""
    if url.startswith(("nats://", "tls://")):
        try:
            from ._nats import NatsStore  # nats-py is needed only here
        except ImportError as exc:
            raise DurableError(
                "the NATS backend needs nats-py: pip install 'speechd[nats]'"
            ) from exc
        return await NatsStore.open(url)
    path = url.removeprefix("file://").removeprefix("file:")
    return await EmbeddedStore.open(path)
