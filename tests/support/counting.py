"""A store that counts what its reads hand back: how tests bound what a request reads."""

from __future__ import annotations

from collections.abc import Sequence

from speechd.durable import (
    MAX_BATCH_BYTES,
    AppendAck,
    AppendRecord,
    Limits,
    ReadBatch,
    Spare,
    Store,
    StreamInfo,
    record_size,
)

__all__ = ["CountingStore"]


class CountingStore(Store):
    """`inner`, with `read_bytes` (bodies and headers of every record read returned, as
    `record_size` weighs them) and `reads` counted. The test owns the inner store."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.read_bytes = 0
        self.reads = 0

    async def append(
        self, stream: str, records: Sequence[AppendRecord], *, match_seq_num: int | None = None
    ) -> AppendAck:
        return await self.inner.append(stream, records, match_seq_num=match_seq_num)

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

    async def check_tail(self, stream: str) -> int:
        return await self.inner.check_tail(stream)

    @property
    def limits(self) -> Limits:
        return self.inner.limits

    async def trim(self, stream: str, before_seq: int) -> int:
        return await self.inner.trim(stream, before_seq)

    async def list(self, prefix: str = "", *, limit: int = 1000) -> list[StreamInfo]:
        return await self.inner.list(prefix, limit=limit)

    async def delete(self, stream: str) -> bool:
        return await self.inner.delete(stream)

    async def sweep(
        self, max_age_s: float, prefixes: Sequence[str], *, spare: Spare | None = None
    ) -> int:
        return await self.inner.sweep(max_age_s, prefixes, spare=spare)

    async def close(self) -> None:
        pass
