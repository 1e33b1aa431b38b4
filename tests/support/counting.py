"""A store that counts what its reads hand back: how tests bound what a request reads."""

from __future__ import annotations

from speechd.durable import (
    MAX_BATCH_BYTES,
    ReadBatch,
    Store,
    record_size,
)

from .forwarding import ForwardingStore

__all__ = ["CountingStore"]


class CountingStore(ForwardingStore):
    """`inner`, with `read_bytes` (bodies and headers of every record read returned, as
    `record_size` weighs them) and `reads` counted. The test owns the inner store."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.read_bytes = 0
        self.reads = 0

    async def read(
        self,
        stream: str,
        seq_num: int = 0,
        *,
        max_records: int = 1000,
        max_bytes: int = MAX_BATCH_BYTES,
        wait: float = 0,
        bodies: bool = True,
    ) -> ReadBatch:
        batch = await self.inner.read(
            stream,
            seq_num,
            max_records=max_records,
            max_bytes=max_bytes,
            wait=wait,
            bodies=bodies,
        )
        self.reads += 1
        self.read_bytes += sum(record_size(r) for r in batch.records)
        return batch

    async def close(self) -> None:
        pass  # the test owns the inner store
