"""A store that counts what its reads hand back: how tests bound what a request reads."""

from __future__ import annotations

from typing import Any

from harness.forwarding import ForwardingStore
from speechd.durable import ReadBatch, Store
from speechd.durable._contract import record_size

__all__ = ["CountingStore"]


class CountingStore(ForwardingStore):
    """`inner`, with `read_bytes` (bodies and headers of every record read returned, as
    `record_size` weighs them) and `reads` counted. The test owns the inner store."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.read_bytes = 0
        self.reads = 0

    async def read(self, stream: str, seq_num: int = 0, **options: Any) -> ReadBatch:
        batch = await super().read(stream, seq_num, **options)
        self.reads += 1
        self.read_bytes += sum(record_size(r) for r in batch.records)
        return batch

    async def close(self) -> None:
        pass  # the test owns the inner store
