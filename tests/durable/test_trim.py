"""Trim (`Store.trim`), on every backend: seqs stay dense, reads below the trim point get the
out-of-range outcome, readers parked below it learn where to resume, followers across it are
undisturbed."""

from __future__ import annotations

import asyncio

import pytest

from speechd.durable import Record, SeqMismatch, SeqOutOfRange, Store

from ._support import OpenHandle, rec


async def _fill(store: Store, stream: str, count: int, start: int = 0) -> None:
    await store.append(stream, [rec(b"%d" % i) for i in range(start, start + count)])


async def _read_from(store: Store, stream: str, seq: int) -> list[Record]:
    records: list[Record] = []
    while batch := (await store.read(stream, seq + len(records))).records:
        records += batch
    return records


async def test_trim_drops_the_records_below_and_keeps_every_seq(store: Store) -> None:
    await _fill(store, "s", 10)
    assert await store.trim("s", 4) == 4
    kept = await _read_from(store, "s", 4)
    assert [(r.seq_num, r.body) for r in kept] == [(i, b"%d" % i) for i in range(4, 10)]
    for below in (0, 3):
        with pytest.raises(SeqOutOfRange) as err:
            await store.read("s", below)
        assert (err.value.seq_num, err.value.first, err.value.tail) == (below, 4, 10)
        assert "trimmed" in str(err.value)
    assert await store.check_tail("s") == 10
    (info,) = await store.list()
    assert (info.name, info.first_seq, info.next_seq) == ("s", 4, 10)
    ack = await store.append("s", [rec(b"10")])
    assert (ack.start_seq, ack.next_seq) == (10, 11)
    assert (await store.read("s", 10)).records[0].body == b"10"


async def test_trim_never_goes_back(store: Store) -> None:
    await _fill(store, "s", 10)
    assert await store.trim("s", 6) == 6
    assert await store.trim("s", 2) == 6
    assert await store.trim("s", 0) == 6
    assert await store.trim("s", 6) == 6
    assert await store.trim("s", 7) == 7
    assert [r.seq_num for r in await _read_from(store, "s", 7)] == [7, 8, 9]


async def test_trim_to_the_tail_keeps_the_stream_going(store: Store) -> None:
    await _fill(store, "s", 5)
    assert await store.trim("s", 5) == 5
    at_tail = await store.read("s", 5)
    assert (at_tail.records, at_tail.tail) == ([], 5)
    with pytest.raises(SeqOutOfRange):
        await store.read("s", 4)
    assert [(i.name, i.first_seq, i.next_seq) for i in await store.list()] == [("s", 5, 5)]
    with pytest.raises(SeqMismatch) as lost:
        await store.append("s", [rec(b"x")], match_seq_num=0)  # it is not empty
    assert lost.value.next_seq == 5
    ack = await store.append("s", [rec(b"5")], match_seq_num=5)
    assert ack.start_seq == 5
    assert [r.body for r in await _read_from(store, "s", 5)] == [b"5"]


async def test_trim_past_the_tail_trims_nothing(store: Store) -> None:
    await _fill(store, "s", 5)
    await store.trim("s", 2)
    for bad in (6, 100, -1):
        with pytest.raises(SeqOutOfRange) as err:
            await store.trim("s", bad)
        assert (err.value.seq_num, err.value.first, err.value.tail) == (bad, 2, 5)
    assert [r.seq_num for r in await _read_from(store, "s", 2)] == [2, 3, 4]


async def test_trim_of_a_missing_stream_makes_nothing(store: Store) -> None:
    assert await store.trim("missing", 0) == 0
    with pytest.raises(SeqOutOfRange) as err:
        await store.trim("missing", 1)
    assert (err.value.first, err.value.tail) == (0, 0)
    assert await store.list() == []
    assert await store.check_tail("missing") == 0


async def test_a_trim_is_not_an_append(store: Store) -> None:
    """Retention goes by the last append: trimming neither touches a stream nor saves it."""
    await _fill(store, "tmp/s", 3)
    (before,) = await store.list("tmp/")
    await asyncio.sleep(0.6)
    await store.trim("tmp/s", 2)
    (after,) = await store.list("tmp/")
    assert after.touched_ms == before.touched_ms
    assert await store.sweep(0.5, ["tmp/"]) == 1
    assert await store.list() == []


async def test_delete_after_trim_starts_again_from_zero(store: Store) -> None:
    await _fill(store, "s", 5)
    await store.trim("s", 3)
    assert await store.delete("s")
    assert await store.trim("s", 0) == 0
    ack = await store.append("s", [rec(b"new")], match_seq_num=0)
    assert ack.start_seq == 0
    assert [(r.seq_num, r.body) for r in await _read_from(store, "s", 0)] == [(0, b"new")]
    assert [(i.first_seq, i.next_seq) for i in await store.list()] == [(0, 1)]


async def test_a_reader_parked_below_the_trim_point_learns_where_to_resume(
    store: Store, open_handle: OpenHandle
) -> None:
    """A slow reader (another handle) stops at seq 5; the stream is trimmed to 8 meanwhile.
    Its next read says the records are trimmed and where the stream now starts."""
    reader = await open_handle()
    await _fill(store, "jobs", 10)
    first = await reader.read("jobs", 0, max_records=5)
    assert [r.seq_num for r in first.records] == [0, 1, 2, 3, 4]
    await store.trim("jobs", 8)
    with pytest.raises(SeqOutOfRange) as err:
        await reader.read("jobs", 5)
    assert (err.value.seq_num, err.value.first, err.value.tail) == (5, 8, 10)
    resumed = await _read_from(reader, "jobs", err.value.first)
    assert [r.seq_num for r in resumed] == [8, 9]
    # A follower that falls behind the trim point ends the same way.
    follower = reader.follow("jobs", 6)
    with pytest.raises(SeqOutOfRange) as err:
        await anext(follower)
    assert err.value.first == 8


async def test_a_follower_across_the_trim_point_sees_every_record(
    store: Store, open_handle: OpenHandle
) -> None:
    """A follower at the live edge (another handle, waiting at the tail) keeps following while
    the stream is trimmed behind it, right up to the tail, again and again."""
    follower_handle = await open_handle()
    await _fill(store, "f", 3)
    seen: list[int] = []
    caught_up = asyncio.Event()
    progress = asyncio.Event()

    async def follow() -> None:
        async for record in follower_handle.follow("f", 0):
            seen.append(record.seq_num)
            progress.set()
            if record.seq_num == 22:
                caught_up.set()

    task = asyncio.ensure_future(follow())
    try:
        for seq in range(3, 23):
            while len(seen) < seq:  # the follower is at the tail, waiting
                progress.clear()
                await asyncio.wait_for(progress.wait(), 10)
            await asyncio.sleep(0.02)  # ...in its long poll
            assert await store.trim("f", seq) == seq  # everything it has read goes
            await store.append("f", [rec(b"%d" % seq)])
        await asyncio.wait_for(caught_up.wait(), 10)
        # A poll waiting at the tail through a trim to the tail is not disturbed.
        poll = asyncio.ensure_future(follower_handle.read("f", 23, wait=20))
        await asyncio.sleep(0.05)
        await store.trim("f", 23)
        await asyncio.sleep(0.05)
        assert not poll.done()
        await store.append("f", [rec(b"23")])
        assert [r.seq_num for r in (await asyncio.wait_for(poll, 10)).records] == [23]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert seen[:23] == list(range(23)) and seen[23:] in ([], [23])


async def test_trims_and_appends_at_once_from_two_handles(
    store: Store, open_handle: OpenHandle
) -> None:
    """An appender and a trimmer (a worker trimming `jobs` while the api appends) race: every
    record at or past the first seq reads back, dense, in order."""
    trimmer = await open_handle()
    appended = 0
    done = False

    async def append() -> None:
        nonlocal appended, done
        for i in range(60):
            await store.append("jobs", [rec(b"%d" % i)])
            appended = i + 1
        done = True

    async def trim() -> None:
        while not done:
            await trimmer.trim("jobs", max(0, appended - 5))
            await asyncio.sleep(0.005)

    await asyncio.gather(append(), trim())
    first = await trimmer.trim("jobs", 50)
    records = await _read_from(store, "jobs", first)
    assert [(r.seq_num, r.body) for r in records] == [(i, b"%d" % i) for i in range(first, 60)]
