"""The line of casts as the api reads it (`QueueLine`): what counts toward the queue limit, a
cast's place in line, and its estimated start."""

from __future__ import annotations

import asyncio
import time

from harness.engines import CostEngine
from speechd.casts import QueueLine
from speechd.casts._queue import QueuePlace, queue_depth
from speechd.casts.schema import (
    JOBS,
    PROGRESS_DONE,
    AudioChunk,
    Eos,
    Failure,
    Receipt,
    Start,
    audio_record,
    cast_stream,
    encode,
    eos_record,
    error_record,
    start_record,
)
from speechd.durable import AppendRecord, Store

from ._helpers import cursor, ended, make_worker, running, submit_text


async def start(store: Store, cid: str, *, worker: str = "w1") -> None:
    start = Start(attempt=1, worker=worker, chunks=4)
    await store.append(cast_stream(cid), [start_record(start)])


async def audio(store: Store, cid: str, *, index: int, planned: int, made_ms: int) -> None:
    chunk = AudioChunk(1, index, planned, 0, made_ms, "words", b"x")
    await store.append(cast_stream(cid), [audio_record(chunk)])


async def finish(store: Store, cid: str) -> None:
    await start(store, cid)
    await store.append(cast_stream(cid), [eos_record(1, Eos(chunks=1, audio_ms=1000, gen_ms=10))])


async def test_finished_casts_behind_a_long_one_do_not_count(store: Store) -> None:
    # A long cast at the head of the line holds the committed cursor at 0 while the short
    # ones behind it finish: `tail(jobs) - cursor` says 9 for as long as it runs.
    long = " ".join(f"word{n}" for n in range(600))  # a minute of audio, paced to its listener
    ids = [await submit_text(store, long)]
    ids += [await submit_text(store, f"short cast number {n}") for n in range(8)]
    async with running(make_worker(store, CostEngine())):
        deadline = time.monotonic() + 30
        while not all([await ended(store, cid) == "eos" for cid in ids[1:]]):
            assert time.monotonic() < deadline, "the short casts did not finish"
            await asyncio.sleep(0.05)
        assert await ended(store, ids[0]) is None and await cursor(store) == 0
        assert await store.check_tail(JOBS) - await cursor(store) == 9
        assert await queue_depth(store) == 1  # the long one, being made


async def test_depth_counts_waiting_and_active_casts_and_unread_jobs(store: Store) -> None:
    line = QueueLine(store, ttl_s=0)
    ids = [await submit_text(store, f"cast {n} of five") for n in range(5)]
    assert await line.depth() == 5
    await start(store, ids[0])
    await finish(store, ids[1])
    failed = Failure(message="it broke", attempts=3)
    await store.append(cast_stream(ids[2]), [error_record(1, failed)])
    assert await line.depth() == 3  # 0 being made, 3 and 4 waiting
    assert await line.unfinished(limit=10) == [ids[0], ids[3], ids[4]]
    # Submitted again after it failed (a new job after the error): it waits to be made again,
    # at the end of the line.
    await store.append(JOBS, [AppendRecord(encode_job(ids[2]))])
    assert await line.depth() == 4
    assert await line.unfinished(limit=10) == [ids[0], ids[3], ids[4], ids[2]]
    # A duplicate job of a waiting cast is one cast, in its first place.
    await store.append(JOBS, [AppendRecord(encode_job(ids[4]))])
    assert await line.depth() == 4
    place = await line.place(ids[4])
    assert place == QueuePlace(ahead=1, starts_in_s=None)  # no ready worker: no estimate


async def test_a_failed_cast_asked_for_again_waits_in_line(store: Store) -> None:
    # The same request for a failed cast claims a remake (a `retry` after the error, then a
    # job): until a worker opens the new attempt, it waits in line like a new cast.
    ahead = await submit_text(store, "a cast that waits ahead")
    failed = await submit_text(store, "a cast that failed")
    await start(store, failed)
    await store.append(
        cast_stream(failed), [error_record(1, Failure(message="it broke", attempts=3))]
    )
    line = QueueLine(store, ttl_s=0)
    assert await line.unfinished(limit=10) == [ahead]
    assert await submit_text(store, "a cast that failed") == failed  # the retry
    assert await line.depth() == 2
    assert await line.unfinished(limit=10) == [ahead, failed]
    assert await line.place(failed) == QueuePlace(ahead=1, starts_in_s=None)
    await start(store, failed)  # the new attempt
    assert await line.place(failed) is None


def encode_job(cid: str) -> bytes:
    from speechd.casts.schema import Job

    return encode(Job(cid))


async def test_each_call_reads_a_bounded_part_of_the_line(store: Store) -> None:
    ids = [await submit_text(store, f"cast {n} in a long line") for n in range(12)]
    for cid in ids[:10]:
        await finish(store, cid)
    line = QueueLine(store, ttl_s=0, scan=4, checks=3)
    depths = [await line.depth() for _ in range(6)]
    # Jobs not read yet count as waiting: the depth only falls as the line is learnt.
    assert depths == sorted(depths, reverse=True) and depths[0] > depths[-1] == 2
    assert await line.unfinished(limit=10) == ids[10:]


async def test_a_queued_cast_knows_its_place_and_when_it_should_start(store: Store) -> None:
    being_made = await submit_text(store, "already under way")
    first, second = [await submit_text(store, "x" * 100 + f" {n}") for n in range(2)]
    await start(store, being_made)
    # 5 s of audio made, 1 chunk of 4: 15 s still to make.
    await audio(store, being_made, index=0, planned=4, made_ms=5000)
    line = QueueLine(store, ttl_s=0)
    assert await line.place(being_made) is None  # being made, not waiting
    # Without receipts the casts being made are taken to run at their listener's pace.
    assert await line.place(first, workers=["w1"]) == QueuePlace(ahead=0, starts_in_s=15.0)
    assert await line.place(second, workers=["w1"]) == QueuePlace(ahead=1, starts_in_s=21.6)
    # A worker measured at half real time makes everything take twice as long.
    receipt = Receipt(id="r", attempt=1, worker="w1", chunks=1, audio_ms=500, gen_ms=1000, xrt=0.5)
    await store.append(PROGRESS_DONE, [AppendRecord(encode(receipt))])
    assert await line.place(first, workers=["w1"]) == QueuePlace(ahead=0, starts_in_s=30.0)
    assert await line.place(second, workers=["w1"]) == QueuePlace(ahead=1, starts_in_s=43.3)


class CountingStore:
    """A store that counts the reads made through it."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.reads = 0

    async def read(self, *args: object, **kwargs: object) -> object:
        self.reads += 1
        return await self._store.read(*args, **kwargs)  # type: ignore[arg-type]

    async def check_tail(self, stream: str) -> int:
        self.reads += 1
        return await self._store.check_tail(stream)


async def test_the_reads_per_call_do_not_grow_with_the_line(store: Store) -> None:
    ids = [await submit_text(store, f"cast {n} of a long history") for n in range(300)]
    for cid in ids[1:]:
        await finish(store, cid)
    await start(store, ids[0])  # the long one at the head: the cursor stays at 0
    counting = CountingStore(store)
    line = QueueLine(counting, ttl_s=0, scan=50, checks=20)  # type: ignore[arg-type]
    per_call = []
    for _ in range(40):
        before = counting.reads
        depth = await line.depth()
        per_call.append(counting.reads - before)
    assert depth == 1
    # The cursor (2), one page of jobs (1), each entry looked at (up to 3), the receipts (1-2).
    assert max(per_call) <= 2 + 1 + 20 * 3 + 2
    before = counting.reads
    await line.depth()
    assert counting.reads - before <= 2 + 1 + 3 + 2  # learnt: only the one being made
