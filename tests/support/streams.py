"""Reading a whole stream in tests, through the store contract alone."""

from __future__ import annotations

from speechd.casts.schema import cast_stream
from speechd.durable import Record, Store

__all__ = ["read_cast", "read_stream"]


async def read_stream(store: Store, stream: str) -> list[Record]:
    """Every record of `stream` up to its tail as the reads meet it, batch by batch from 0."""
    out: list[Record] = []
    while True:
        batch = await store.read(stream, len(out))
        out.extend(batch.records)
        if len(out) >= batch.tail:
            return out


async def read_cast(store: Store, cast_id: str) -> list[Record]:
    """Every record of the cast's stream."""
    return await read_stream(store, cast_stream(cast_id))
