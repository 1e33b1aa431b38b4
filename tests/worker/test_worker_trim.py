"""The worker keeps `jobs`, `jobs/_cursor` and `progress/done` bounded with the store's trim,
and every reader of them resumes at the first seq when it finds its place trimmed away."""

from __future__ import annotations

import asyncio
import time

import pytest

from speechd.casts import (
    JOBS,
    JOBS_CURSOR,
    PROGRESS_DONE,
    QueueLine,
    Receipt,
    decode,
    encode,
)
from speechd.durable import AppendRecord, SeqOutOfRange, Store

from ._helpers import cursor, ended, make_worker, running, submit_text, wait_cursor, wait_ended


async def first_seq(store: Store, stream: str) -> int:
    """The stream's first seq, as a reader below it is told."""
    try:
        await store.read(stream, 0, max_records=1)
    except SeqOutOfRange as exc:
        return exc.first
    return 0


async def wait_first(store: Store, stream: str, first: int, within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while (found := await first_seq(store, stream)) < first:
        if time.monotonic() > deadline:
            raise AssertionError(f"{stream} starts at {found} < {first} after {within} s")
        await asyncio.sleep(0.05)


async def test_jobs_are_trimmed_below_the_cursor_and_one_cursor_record_is_kept(
    store: Store,
) -> None:
    ids = [await submit_text(store, f"cast number {n}") for n in range(5)]
    async with running(make_worker(store)):
        await wait_ended(store, ids)
        await wait_cursor(store, 5)
        await wait_first(store, JOBS, 5)
        await wait_first(store, JOBS_CURSOR, await store.check_tail(JOBS_CURSOR) - 1)
        more = [await submit_text(store, f"another cast {n}") for n in range(3)]
        await wait_ended(store, more)
        await wait_cursor(store, 8)
        await wait_first(store, JOBS, 8)
        cursor_tail = await store.check_tail(JOBS_CURSOR)
        await wait_first(store, JOBS_CURSOR, cursor_tail - 1)
    # Seqs stay dense: the tail is what it was; the cursor's one record says where to start.
    assert await store.check_tail(JOBS) == 8
    assert await cursor(store) == 8
    with pytest.raises(SeqOutOfRange) as below:
        await store.read(JOBS, 4)
    assert (below.value.first, below.value.tail) == (8, 8)


@pytest.mark.nats
async def test_jobs_are_trimmed_on_a_stock_nats_server_too(stock_store: Store) -> None:
    ids = [await submit_text(stock_store, f"cast number {n}") for n in range(3)]
    async with running(make_worker(stock_store)):
        await wait_ended(stock_store, ids, within=60)
        await wait_cursor(stock_store, 3, within=60)
        await wait_first(stock_store, JOBS, 3, within=60)
        tail = await stock_store.check_tail(JOBS_CURSOR)
        await wait_first(stock_store, JOBS_CURSOR, tail - 1, within=60)


async def test_a_restarted_worker_reads_on_from_the_trimmed_cursor(store: Store) -> None:
    ids = [await submit_text(store, f"cast number {n}") for n in range(3)]
    async with running(make_worker(store)):
        await wait_ended(store, ids)
        await wait_first(store, JOBS, 3)
    later = await submit_text(store, "made by the next life")
    async with running(make_worker(store)):
        await wait_ended(store, [later])
        await wait_cursor(store, 4)


async def test_an_intake_whose_place_was_trimmed_resumes_at_the_first_seq(store: Store) -> None:
    # Two jobs below a trim point (as another worker's commit leaves them: finished), one
    # above. The worker opens at the cursor (0), finds its place trimmed away, and goes on
    # from the first seq: it makes the cast above and commits past all three.
    skipped = [await submit_text(store, f"finished elsewhere {n}") for n in range(2)]
    await store.trim(JOBS, 2)
    wanted = await submit_text(store, "the one above the trim")
    async with running(make_worker(store)):
        await wait_ended(store, [wanted])
        await wait_cursor(store, 3)
    assert [await ended(store, cid) for cid in skipped] == [None, None]


async def test_the_queue_line_reads_on_past_a_trim_below_its_place(store: Store) -> None:
    ids = [await submit_text(store, f"waiting cast {n}") for n in range(5)]
    line = QueueLine(store, ttl_s=0, scan=1)
    assert await line.depth() == 5  # one job read, four counted unread
    await store.trim(JOBS, 3)  # trimmed past where it reads (jobs 1 and 2 finished)
    await line.refresh(full=True)
    assert await line.unfinished(limit=10) == [ids[0], ids[3], ids[4]]
    assert (await line.place(ids[4])) is not None
    assert (await line.place(ids[4])).ahead == 2  # type: ignore[union-attr]


async def test_progress_done_keeps_a_window_of_receipts(store: Store) -> None:
    ids = [await submit_text(store, f"cast number {n}") for n in range(12)]
    async with running(make_worker(store, receipts=4)):
        await wait_ended(store, ids)
        await wait_cursor(store, 12)
    tail = await store.check_tail(PROGRESS_DONE)
    assert tail == 12
    first = await first_seq(store, PROGRESS_DONE)
    assert 4 <= tail - first < 8  # at least the window, and fewer than twice it
    kept = (await store.read(PROGRESS_DONE, first)).records
    assert {decode(r.body, Receipt).id for r in kept} <= set(ids)


async def test_the_queue_line_reads_receipts_from_a_trimmed_window(store: Store) -> None:
    for n in range(100):
        receipt = Receipt(f"c{n}", 1, "w1", 4, 4000, 400, 10.0)
        await store.append(PROGRESS_DONE, [AppendRecord(encode(receipt))])
    await store.trim(PROGRESS_DONE, 90)  # a window of 10: less than the line reads back
    cid = await submit_text(store, "a waiting cast")
    line = QueueLine(store, ttl_s=0)
    await line.refresh()
    await line.refresh()  # the first refresh learns where the receipts start
    place = await line.place(cid, workers=["w1"])
    assert place is not None and place.ahead == 0
    assert place.starts_in_s is not None  # measured: the receipts in the window were read


async def test_a_job_record_that_is_not_a_job_is_trimmed_with_the_rest(store: Store) -> None:
    await store.append(JOBS, [AppendRecord(b"not json")])
    cid = await submit_text(store, "after the garbage")
    async with running(make_worker(store)):
        await wait_ended(store, [cid])
        await wait_cursor(store, 2)
        await wait_first(store, JOBS, 2)
    assert await store.check_tail(JOBS) == 2
