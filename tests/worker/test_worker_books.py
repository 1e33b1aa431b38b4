"""Background jobs (a book's chapters) through the real worker loop on a store, with the
cost-model engine: they wait for the listeners, a book's cancel stops them without writing
into them, a listener opening one promotes it, and each is made once."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from harness import engines
from harness.engines import CostEngine, expected_audio
from speechd.casts import cast_id, deployment_secret, last_notice, submit
from speechd.casts.schema import (
    JOBS,
    CancelBook,
    Event,
    Job,
    Recipe,
    Start,
    cast_stream,
    decode,
    encode,
    event_of,
)
from speechd.durable import AppendRecord, Store
from speechd.engine import EngineConfig
from speechd.worker import Supervisor, WorkerConfig

from ._helpers import (
    check_layout,
    complete_audio,
    cursor,
    ended_stream,
    make_worker,
    records,
    running,
    submit_text,
    wait_cursor,
)
from .test_worker_planning import RealPlanEngine, hostile

BOOK = "B" * 22
CHAPTER = " ".join(f"word{n}" for n in range(120))  # 15 chunks of the cost model's plan


async def chapter(store: Store, text: str, *, book: str = BOOK) -> str:
    """A chapter submitted as a book's (a background job), in pcm."""
    secret = await deployment_secret(store)
    cid = cast_id(secret, model="kokoro", voice="af_heart", speed=1.0, format="pcm", text=text)
    recipe = Recipe(
        text=text, model="kokoro", voice="af_heart", speed=1.0, format="pcm",
        title=text[:20], created_ms=int(time.time() * 1000),
    )  # fmt: skip
    await submit(store, cid, recipe, sample_rate=24_000, background=True, book=book)
    return cid


async def audio_records(store: Store, cid: str) -> int:
    return sum(event_of(r) == Event.AUDIO for r in await records(store, cast_stream(cid)))


async def until(check, within: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_a_listeners_cast_goes_before_a_book_submitted_first(store: Store) -> None:
    """A listener that never gets comfortably ahead (the lead is out of reach here) keeps the
    device: the book waiting in line before it gets its first chunk only once it is done."""
    chapters = [await chapter(store, f"{CHAPTER} {n}") for n in range(2)]
    listener = await submit_text(store, CHAPTER + " listener")
    engine = CostEngine()
    async with running(make_worker(store, engine, comfortable_lead_s=1e6)):
        streams = [await ended_stream(store, cid) for cid in [listener, *chapters]]
    eos = streams[0][-1]
    assert event_of(eos) == Event.EOS
    for stream in streams[1:]:
        first_audio = next(r for r in stream if event_of(r) == Event.AUDIO)
        assert first_audio.timestamp >= eos.timestamp
        assert event_of(stream[-1]) == Event.EOS
    # One after the other, in order: every chunk of the first chapter before the second's.
    made = [text for text, _ in engine.calls if text.endswith((" 0", " 1")) or "listener" in text]
    assert made[-1].endswith(" 1")


async def test_cancel_skips_the_waiting_chapters_and_stops_the_one_being_made(
    store: Store,
) -> None:
    ids = [await chapter(store, f"{CHAPTER} {n}") for n in range(3)]
    engine = CostEngine(rtf=0.5, overhead_s=0.01)
    async with running(make_worker(store, engine)):
        await until(lambda: _has_audio(store, ids[0]))
        await store.append(JOBS, [AppendRecord(encode(CancelBook(BOOK)))])
        await wait_cursor(store, 4)  # the three jobs and the cancel, all finished
        before = await records(store, cast_stream(ids[0]))
        await asyncio.sleep(0.5)
        assert await records(store, cast_stream(ids[0])) == before  # nothing more written
    assert event_of(before[-1]) == Event.AUDIO  # neither eos nor error: it is left as it is
    for cid in ids[1:]:
        assert len(await records(store, cast_stream(cid))) == 1  # only its meta: never made
    # A job for it later (the book made again) goes on from what it made: each chunk once.
    await store.append(JOBS, [AppendRecord(encode(Job(ids[0], background=True, book=BOOK)))])
    engine = CostEngine(rtf=0.5, overhead_s=0.01)
    made_before = len(await _audio_texts(store, ids[0]))
    async with running(make_worker(store, engine)):
        stream = await ended_stream(store, ids[0])
    assert complete_audio(stream) == expected_audio(ids[0], f"{CHAPTER} 0")
    assert len(engine.calls) + made_before == len(await _audio_texts(store, ids[0]))


async def test_a_cancel_spares_a_later_job_of_the_same_book(store: Store) -> None:
    early = await chapter(store, f"{CHAPTER} early")
    await store.append(JOBS, [AppendRecord(encode(CancelBook(BOOK)))])
    late = await chapter(store, f"{CHAPTER} late")
    async with running(make_worker(store, CostEngine())):
        stream = await ended_stream(store, late)
        await wait_cursor(store, 3)
    assert event_of(stream[-1]) == Event.EOS
    assert len(await records(store, cast_stream(early))) == 1


async def test_a_listener_opening_a_chapter_promotes_it(store: Store) -> None:
    """With a listener that never sleeps, a book's chapter gets no chunk; a foreground job
    for it (its listener opened it) makes it a listener's cast: it is made beside the other
    listener, and ends long before it."""
    long = await submit_text(store, " ".join(f"long{n}" for n in range(4000)))
    book = await chapter(store, CHAPTER)
    engine = CostEngine(rtf=0.05, overhead_s=0.002)
    async with running(make_worker(store, engine, comfortable_lead_s=1e6)) as _:
        await until(lambda: _has_audio(store, long))
        await asyncio.sleep(0.3)
        assert await audio_records(store, book) == 0  # no spare time: it waits
        await store.append(JOBS, [AppendRecord(encode(Job(book)))])
        promoted = await ended_stream(store, book)
        assert event_of(promoted[-1]) == Event.EOS
        tail = await records(store, cast_stream(long))
        assert event_of(tail[-1]) == Event.AUDIO, "the long listener ended first"
        await ended_stream(store, long, within=120)
    assert complete_audio(promoted) == expected_audio(book, CHAPTER)
    assert await cursor(store) == 3


class SlowFirstPage(CostEngine):
    """The book's first chunk (text with "page" in it) takes `slow_s`, unless it is stopped;
    once one was stopped, every chunk takes what the cost model says."""

    def __init__(self, slow_s: float) -> None:
        super().__init__()
        self.slow_s = slow_s
        self.started = threading.Event()

    def synthesize(self, chunk, voice, speed, *, seed=None, stop=None):  # type: ignore[no-untyped-def]
        if "page" in chunk.text and not self.preempted and not self.started.is_set():
            self.started.set()
            self.compute(self.slow_s, chunk, stop)
        return super().synthesize(chunk, voice, speed, seed=seed, stop=stop)


PAGES = " ".join(f"page{n}" for n in range(60))
LISTENER = "a listener arrives while the book is made"


async def test_a_listener_arriving_stops_the_books_chunk_in_flight(store: Store) -> None:
    """A book's chunk a minute long is in flight when a listener's request comes: the chunk
    gives way at once, the listener's cast is made whole before any of the book's audio,
    and the book is made after, whole, the stopped chunk made again and nothing twice."""
    book = await chapter(store, PAGES)
    engine = SlowFirstPage(slow_s=60.0)
    async with running(make_worker(store, engine)):
        assert await asyncio.to_thread(engine.started.wait, 30)
        listener = await submit_text(store, LISTENER)
        heard = await ended_stream(store, listener, within=20)  # not the minute the chunk takes
        made = await ended_stream(store, book)
    assert complete_audio(heard) == expected_audio(listener, LISTENER)
    assert complete_audio(made) == expected_audio(book, PAGES)
    assert engine.preempted == ["page0 page1"]  # the book's first chunk, stopped once
    pages = [text for text, _ in engine.calls if "page" in text]
    assert len(pages) == len(set(pages)) == len(await _audio_texts(store, book))  # each once
    first_book_audio = next(r for r in made if event_of(r) == Event.AUDIO)
    assert heard[-1].timestamp <= first_book_audio.timestamp


async def test_a_books_chunk_is_not_stopped_for_more_of_the_book(store: Store) -> None:
    """Only a listener stops a book's chunk: another chapter of a book joining the line, or
    a job for the very chapter being made (its listener opened it), does not."""
    book = await chapter(store, PAGES)
    engine = SlowFirstPage(slow_s=1.0)
    async with running(make_worker(store, engine)):
        assert await asyncio.to_thread(engine.started.wait, 30)
        other = await chapter(store, CHAPTER)
        await store.append(JOBS, [AppendRecord(encode(Job(book)))])  # opened by a listener
        made = [await ended_stream(store, cid) for cid in (book, other)]
    assert engine.preempted == []
    assert complete_audio(made[0]) == expected_audio(book, PAGES)
    assert complete_audio(made[1]) == expected_audio(other, CHAPTER)


async def test_a_books_planning_waits_while_a_listeners_first_chunk_is_planned(
    store: Store,
) -> None:
    """A chapter whose text takes many planning steps, and a listener arriving meanwhile
    whose first chunk takes more than one call's slice of planning to find: from the
    listener's first planning step to its first chunk, neither a step of the book's plan nor
    a chunk of the book runs (nothing would stop that chunk: the listener's job was taken)."""
    events: list[tuple[str, str]] = []

    class Logged(RealPlanEngine):
        def planner(self, voice, policy, *, text="", **kwargs):  # type: ignore[no-untyped-def]
            planner = super().planner(voice, policy, text=text, **kwargs)
            step, whose = planner.step, "listener" if "Hello" in text else "book"

            def logged(idle_s: float | None = None):  # type: ignore[no-untyped-def]
                events.append(("plan", whose))
                if whose == "listener":
                    time.sleep(0.03)  # a slow G2P: its steps outlast one call's slice
                return step(idle_s)

            planner.step = logged  # type: ignore[method-assign]
            return planner

        def synthesize(self, chunk, voice, speed, *, seed=None, stop=None):  # type: ignore[no-untyped-def]
            events.append(("make", "listener" if "Hello" in chunk.text else "book"))
            return super().synthesize(chunk, voice, speed, seed=seed, stop=stop)

    engine = Logged(audio_per_char=0.002, rtf=0.05)
    await chapter(store, hostile(100_000))
    async with running(make_worker(store, engine)):
        await until(lambda: _made_some(events))
        # A first chunk that takes more than one call's slice of planning to find.
        await submit_text(store, "Hello " + hostile(30_000))
        await until(lambda: _made_by(events, "listener"), within=60)
    first_step = events.index(("plan", "listener"))
    first_chunk = events.index(("make", "listener"))
    between = events[first_step:first_chunk]
    assert ("plan", "listener") in between[1:]  # planned over more than one step
    assert ("plan", "book") not in between and ("make", "book") not in between, between


async def _made_some(events: list[tuple[str, str]]) -> bool:
    return ("make", "book") in events


async def _made_by(events: list[tuple[str, str]], whose: str) -> bool:
    return ("make", whose) in events


async def _has_audio(store: Store, cid: str) -> bool:
    return await audio_records(store, cid) > 0


async def _audio_texts(store: Store, cid: str) -> list[bytes]:
    return [
        r.header(b"t") or b""
        for r in await records(store, cast_stream(cid))
        if event_of(r) == Event.AUDIO
    ]


async def test_a_book_cancelled_and_made_again_at_once_goes_on(store: Store) -> None:
    """The cancel and the jobs that make the book again, read together: the chapter being
    made goes on (its new job is not mistaken for a duplicate of the one being dropped)."""
    ids = [await chapter(store, f"{CHAPTER} {n}") for n in range(2)]
    engine = CostEngine(rtf=0.5, overhead_s=0.01)
    async with running(make_worker(store, engine)):
        await until(lambda: _has_audio(store, ids[0]))
        again = [AppendRecord(encode(Job(cid, background=True, book=BOOK))) for cid in ids]
        await store.append(JOBS, [AppendRecord(encode(CancelBook(BOOK))), *again])
        streams = [await ended_stream(store, cid) for cid in ids]
    for cid, n, stream in zip(ids, range(2), streams, strict=True):
        assert complete_audio(stream) == expected_audio(cid, f"{CHAPTER} {n}")


@pytest.mark.slow
async def test_a_worker_killed_mid_book_loses_nothing(store: Store, store_dir: Path) -> None:
    """kill -9 while a book's chapter is made in the background: the restarted worker makes
    the book on, the chapter from the chunk in flight (every chunk before it kept by
    reference, none made twice), and every chapter's audio is whole."""
    settings = {"rtf": 0.2, "overhead_s": 0.05}
    config = WorkerConfig(store=str(store_dir), engine=EngineConfig(), heartbeat_s=0.2)
    parts = engines.parts(**settings)  # type: ignore[arg-type]
    supervisor = Supervisor(config, parts=parts, backoff_s=0.5)
    supervisor.start()
    texts = [f"{CHAPTER} killed {n}" for n in range(3)]
    try:
        ids = [await chapter(store, text) for text in texts]
        flight: tuple[str, int] | None = None
        deadline = time.monotonic() + 60
        while flight is None:  # a chapter's chunk in flight, past its first
            assert time.monotonic() < deadline, "no chapter under way"
            found = await last_notice(store, supervisor.worker_id)
            if found is not None and found[1].cast in ids[1:] and found[1].chunk > 0:
                flight = (found[1].cast, found[1].chunk)
            await asyncio.sleep(0.005)
        pid = supervisor.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        streams = [await ended_stream(store, cid, within=120) for cid in ids]
    finally:
        supervisor.stop()
    assert supervisor.exit_codes == [-signal.SIGKILL]
    engine = CostEngine(**settings)
    for cid, text, stream in zip(ids, texts, streams, strict=True):
        assert complete_audio(stream) == expected_audio(cid, text, engine=engine)
    cast, index = flight
    attempts = check_layout(streams[ids.index(cast)])
    resumed = next(s for s in (decode(a[0].body, Start) for a in attempts) if s.attempt > 1)
    assert resumed.keep == index and resumed.deaths == 1
