"""Failure accounting per chunk: a worker that dies with a chunk in flight (here: its store
failed the append) counts against that chunk, but one death is never a verdict; the same chunk
killing the worker again is. And an attempt that cannot continue the earlier audio (another
plan) keeps nothing: readers following the cast are told to read it again."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from harness.engines import CostEngine, FakeChunkPolicy, chunked_text, expected_audio
from speechd.casts import cast_audio
from speechd.casts.schema import Event, Failure, Start, cast_stream, decode, event_of
from speechd.durable import AppendAck, AppendRecord, DurableError, Store
from speechd.errors import CastFailed

from ._helpers import (
    Partitioned,
    complete_audio,
    make_worker,
    records,
    running,
    submit_text,
    wait_ended,
)

TEXT = chunked_text(6)


class FailingAppends(Partitioned):
    """A store whose appends to the cast stream fail once it holds `after` records."""

    def __init__(self, inner: Store, cast_id: str, after: int) -> None:
        super().__init__(inner, cast_stream(cast_id))
        self.after = after

    async def append(
        self, stream: str, records: Sequence[AppendRecord], *, match_seq_num: int | None = None
    ) -> AppendAck:
        if stream == self.prefix and await self.inner.check_tail(stream) >= self.after:
            raise DurableError("the store went away")
        return await self.inner.append(stream, records, match_seq_num=match_seq_num)


async def die_on_the_store(store: Store, cid: str, after: int, **settings: object) -> None:
    """Run a worker (id w1) until its append of the cast's record `after` fails."""
    worker = make_worker(FailingAppends(store, cid, after), CostEngine(), **settings)  # type: ignore[arg-type]
    with pytest.raises(DurableError):
        await asyncio.wait_for(worker.run(asyncio.Event()), 20)
    await worker.idle()


def starts(stream: list) -> list[Start]:  # type: ignore[type-arg]
    return [decode(r.body, Start) for r in stream if event_of(r) == Event.START]


async def test_one_death_on_a_chunk_is_not_a_verdict(store: Store) -> None:
    cid = await submit_text(store, TEXT)
    await die_on_the_store(store, cid, after=5, retries=0)  # meta, start, 3 chunks: dies on #4
    async with running(make_worker(store, CostEngine(), retries=0)):
        for _ in range(400):
            stream = await records(store, cast_stream(cid))
            if event_of(stream[-1]) in (Event.EOS, Event.ERROR):
                break
            await asyncio.sleep(0.05)
    assert event_of(stream[-1]) == Event.EOS  # even with no retries allowed
    _, second = starts(stream)
    assert (second.keep, second.chunk_failures, second.deaths, second.failures) == (3, 1, 1, 1)
    assert complete_audio(stream) == expected_audio(cid, TEXT)


async def test_the_same_chunk_killing_the_worker_twice_is(store: Store) -> None:
    cid = await submit_text(store, TEXT)
    await die_on_the_store(store, cid, after=5, retries=1)
    await die_on_the_store(store, cid, after=6, retries=1)  # the second life: start, then dies
    async with running(make_worker(store, CostEngine(), retries=1)):
        for _ in range(400):
            stream = await records(store, cast_stream(cid))
            if event_of(stream[-1]) in (Event.EOS, Event.ERROR):
                break
            await asyncio.sleep(0.05)
    assert event_of(stream[-1]) == Event.ERROR
    assert "died 2 times" in decode(stream[-1].body, Failure).message
    assert [(s.keep, s.chunk_failures, s.deaths) for s in starts(stream)] == [(0, 0, 0), (3, 1, 1)]


async def test_another_plan_starts_over_and_live_readers_are_told(store: Store) -> None:
    cid = await submit_text(store, TEXT)
    first = make_worker(store, CostEngine(rtf=0.5, audio_per_char=0.01), stop_grace_s=0.0)
    async with running(first):
        for _ in range(400):
            stream = await records(store, cast_stream(cid))
            if sum(event_of(r) == Event.AUDIO for r in stream) >= 2:
                break
            await asyncio.sleep(0.02)
    heard: list[bytes] = []
    following = asyncio.Event()

    async def listen() -> None:
        async for body in cast_audio(store, cid):
            heard.append(body)
            if len(heard) == 2:  # it replayed the first attempt's audio and follows live
                following.set()

    reader = asyncio.create_task(listen())
    await asyncio.wait_for(following.wait(), 10)
    other = make_worker(store, CostEngine(), chunk_policy=FakeChunkPolicy(first_words=3))
    async with running(other):
        with pytest.raises(CastFailed, match="started over"):
            await asyncio.wait_for(reader, 20)
        await wait_ended(store, [cid])
    stream = await records(store, cast_stream(cid))
    assert [s.keep for s in starts(stream)] == [0, 0]  # another plan: nothing kept
    data = b"".join([b async for b in cast_audio(store, cid)])  # read again: the new audio
    assert data == complete_audio(stream)
