"""The worker loop in-process, on a real embedded store, with the cost-model engine."""

from __future__ import annotations

import asyncio

from harness.engines import CostEngine, expected_audio
from speechd.casts import cast_audio
from speechd.casts._records import audio_chunk
from speechd.casts.schema import (
    JOBS,
    JOBS_DEAD,
    PROGRESS_DONE,
    DeadJob,
    Eos,
    Failure,
    Job,
    Receipt,
    RecordSpan,
    Start,
    cast_stream,
    decode,
    encode,
)
from speechd.durable import AppendRecord, Store
from speechd.worker._policy import DeadlinePolicy

from ._helpers import (
    check_layout,
    complete_audio,
    cursor,
    make_worker,
    records,
    running,
    submit_text,
    wait_ended,
)

TEXT = "The quick brown fox jumps over the lazy dog and keeps on running far away from home"


async def test_a_cast_ends_in_eos_with_every_chunk_once(store: Store) -> None:
    cid = await submit_text(store, TEXT)
    async with running(make_worker(store)):
        await wait_ended(store, [cid])
    stream = await records(store, cast_stream(cid))
    assert complete_audio(stream) == expected_audio(cid, TEXT)
    start = decode(stream[1].body, Start)
    assert (start.attempt, start.worker) == (1, "w1")
    assert start.chunks >= 1  # an estimate: the plan is made lazily, after the start
    eos = decode(stream[-1].body, Eos)
    assert eos.chunks == 4
    chunks = [audio_chunk(r) for r in stream[2:-1]]
    assert [c.text for c in chunks] == [
        "The quick",
        "brown fox jumps over",
        "the lazy dog and keeps on running far",
        "away from home",
    ]
    # Offsets are contiguous and sum to the total.
    assert [c.offset_ms for c in chunks[1:]] == [c.offset_ms + c.duration_ms for c in chunks[:-1]]
    assert eos.audio_ms == chunks[-1].offset_ms + chunks[-1].duration_ms
    receipts = [decode(r.body, Receipt) for r in await records(store, PROGRESS_DONE)]
    assert [(r.id, r.chunks, r.audio_ms) for r in receipts] == [(cid, 4, eos.audio_ms)]
    assert await cursor(store) == 1
    audio = b"".join([chunk async for chunk in cast_audio(store, cid)])
    assert audio == expected_audio(cid, TEXT)


async def test_finished_and_duplicate_jobs_are_skipped(store: Store) -> None:
    engine = CostEngine()
    cid = await submit_text(store, TEXT)
    await store.append(JOBS, [AppendRecord(encode(Job(cid)))])  # a duplicate, while active
    async with running(make_worker(store, engine)):
        await wait_ended(store, [cid])
        await store.append(JOBS, [AppendRecord(encode(Job(cid)))])  # a replay, once done
        await store.append(JOBS, [AppendRecord(b"not json")])  # garbage never blocks
        for _ in range(100):
            if await cursor(store) == 4:
                break
            await asyncio.sleep(0.02)
    assert await cursor(store) == 4
    stream = await records(store, cast_stream(cid))
    assert len(check_layout(stream)) == 1
    assert len(engine.calls) == 4


async def test_a_text_with_nothing_to_say_gets_a_valid_empty_file(store: Store) -> None:
    cid = await submit_text(store, "...")
    async with running(make_worker(store, CostEngine(silent="..."))):
        await wait_ended(store, [cid])
    stream = await records(store, cast_stream(cid))
    assert complete_audio(stream) == b"HEADTAIL"
    assert decode(stream[-1].body, Eos) == Eos(chunks=1, audio_ms=0, gen_ms=0)


async def test_out_of_order_completion_holds_the_watermark(store: Store) -> None:
    engine = CostEngine(rtf=0.2)  # slow enough that the long cast is still running
    long_text = " ".join(["word"] * 80)
    long_id = await submit_text(store, long_text)
    short_id = await submit_text(store, "just two")
    never_sleep = DeadlinePolicy(comfortable_lead_s=1e9)
    async with running(make_worker(store, engine, policy=never_sleep)):
        await wait_ended(store, [short_id], within=10)
        assert await wait_ended(store, [short_id]) == {short_id: "eos"}
        # The short job (offset 1) is done; the long one (offset 0) is not: cursor stays at 0.
        assert await cursor(store) == 0
        await wait_ended(store, [long_id], within=30)
        for _ in range(50):
            if await cursor(store) == 2:
                break
            await asyncio.sleep(0.02)
        assert await cursor(store) == 2


async def test_a_poison_job_goes_to_dead_and_the_others_complete(store: Store) -> None:
    good = await submit_text(store, "all is well here today")
    bad = await submit_text(store, "this one is POISON for sure")
    after = await submit_text(store, "and this one is fine too")
    engine = CostEngine()
    async with running(make_worker(store, engine, retries=2)):
        ends = await wait_ended(store, [good, bad, after])
    assert ends == {good: "eos", bad: "error", after: "eos"}
    stream = await records(store, cast_stream(bad))
    attempts = check_layout(stream)
    assert len(attempts) == 3  # the first try and two retries
    failure = decode(stream[-1].body, Failure)
    assert "3 times" in failure.message and failure.attempts == 3
    dead = [decode(r.body, DeadJob) for r in await records(store, JOBS_DEAD)]
    assert [(d.id, d.attempts) for d in dead] == [(bad, 3)]
    assert await cursor(store) == 3


async def test_a_transient_failure_resumes_without_redoing_chunks(store: Store) -> None:
    text = "one two three four five six seven FLAKY eight nine ten"
    cid = await submit_text(store, text)
    engine = CostEngine()
    async with running(make_worker(store, engine)):
        assert await wait_ended(store, [cid]) == {cid: "eos"}
    stream = await records(store, cast_stream(cid))
    attempts = check_layout(stream)
    assert len(attempts) == 2
    assert complete_audio(stream) == expected_audio(cid, text)
    # Attempt 2 keeps the two chunks made before the failure by reference (nothing copied)
    # and makes only the one that failed.
    start = decode(attempts[1][0].body, Start)
    assert (start.keep, start.kept) == (2, [RecordSpan(attempts[0][1].seq_num, 0, 2)])
    assert (start.chunk_failures, start.deaths, start.failures) == (1, 0, 1)
    assert len(attempts[0]) == 3 and len(attempts[1]) == 2
    assert len(engine.calls) == 4  # 3 chunks + the failed try
