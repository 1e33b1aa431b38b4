"""A store that hands every call to another: what a test's (or a load test's) store wrapper
builds on, overriding only the calls it watches, slows or breaks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from speechd.durable import (
    AppendAck,
    AppendRecord,
    Limits,
    ReadBatch,
    Spare,
    Store,
    StreamInfo,
)

__all__ = ["ForwardingStore"]


class ForwardingStore(Store):
    """`inner`, call for call; `close` closes it too (a wrapper whose test owns the inner
    store overrides `close`)."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner

    async def append(
        self, stream: str, records: Sequence[AppendRecord], *, match_seq_num: int | None = None
    ) -> AppendAck:
        return await self.inner.append(stream, records, match_seq_num=match_seq_num)

    async def read(self, stream: str, seq_num: int = 0, **options: Any) -> ReadBatch:
        return await self.inner.read(stream, seq_num, **options)

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
        await self.inner.close()
