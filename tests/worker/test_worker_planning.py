"""The worker plans every cast lazily, a bounded slice at a time between chunk renders: a
hostile text cannot hold the engine thread, and the records say where each chunk ends."""

from __future__ import annotations

import asyncio
import threading
import time

from speechd.casts._records import audio_chunk
from speechd.casts.schema import Event, cast_stream, event_of
from speechd.durable import Store
from speechd.text import ChunkPolicy, Planner
from speechd.worker._policy import FifoPolicy
from tests.support.engines import CostEngine, FakeChunkPolicy, GatedEngine
from tests.support.planner import WordG2P
from tests.worker._helpers import make_worker, records, running, submit_text, wait_ended

ORDINARY = "Hello there, this is an ordinary request that came second."


def hostile(n: int = 200_000) -> str:
    """Runs of the characters the normaliser reads specially, `n` characters in all."""
    block = "[" * 4000 + "1-" * 3000 + "a@" * 3000 + "[a](" * 500
    return (block * (n // len(block) + 1))[:n]


def _real(policy: FakeChunkPolicy) -> ChunkPolicy:
    """The engine's chunk policy timed as the worker timed the double's."""
    return ChunkPolicy().with_rtf(
        policy.rtf, overhead_s=policy.overhead_s, max_chunk_s=policy.max_chunk_s
    )


class _RealPlanner(Planner):
    def retime(self, policy: FakeChunkPolicy) -> None:  # type: ignore[override]
        super().retime(_real(policy))


class RealPlanEngine(CostEngine):
    """The cost model, planned by the real incremental planner (normaliser, slices, chunker)
    around a word-per-unit G2P: the planning the worker runs, without the model."""

    def planner(  # type: ignore[override]
        self,
        voice: str,
        policy: FakeChunkPolicy,
        *,
        text: str = "",
        done: bool = False,
        position: str | None = None,
        flush_s: float = 0.6,
    ) -> Planner:
        self.plans.append((policy.rtf, policy.overhead_s, policy.max_chunk_s))
        return _RealPlanner(
            WordG2P(), _real(policy), text=text, done=done, position=position, flush_s=flush_s
        )


async def _audio_texts(store: Store, cast_id: str) -> list[str]:
    return [
        audio_chunk(r).text
        for r in await records(store, cast_stream(cast_id))
        if event_of(r) == Event.AUDIO
    ]


async def test_a_hostile_cast_and_an_ordinary_one_after_it_both_progress(store: Store) -> None:
    engine = RealPlanEngine(audio_per_char=0.002, rtf=0.05)
    big = await submit_text(store, hostile())
    async with running(make_worker(store, engine)):
        await asyncio.sleep(0.05)  # the hostile cast is admitted and planning
        small = await submit_text(store, ORDINARY)
        await wait_ended(store, [small], within=60)
        made = [text for text, _ in engine.calls]
    # Every call before the ordinary cast's first chunk was one of the hostile cast's.
    first_ordinary = next(n for n, text in enumerate(made) if "Hello" in text)
    assert first_ordinary < 10, made[: first_ordinary + 1]
    assert await _audio_texts(store, big)  # the hostile cast progresses too
    spoken = " ".join(await _audio_texts(store, small))
    assert spoken.split() == ORDINARY.split()


async def test_planning_a_hostile_text_never_holds_the_engine_for_long(store: Store) -> None:
    longest = [0.0]

    class Timed(RealPlanEngine):
        def planner(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            planner = super().planner(*args, **kwargs)
            step = planner.step

            def timed(idle_s: float | None = None):  # type: ignore[no-untyped-def]
                began = time.perf_counter()
                try:
                    return step(idle_s)
                finally:
                    longest[0] = max(longest[0], time.perf_counter() - began)

            planner.step = timed  # type: ignore[method-assign]
            return planner

    engine = Timed(audio_per_char=0.002, rtf=0.0, overhead_s=0.0)
    cast = await submit_text(store, hostile(50_000))
    async with running(make_worker(store, engine, policy=FifoPolicy())):  # no pacing
        await wait_ended(store, [cast], within=120)
    # A generous ceiling (a step is a slice of a few thousand characters: milliseconds).
    assert longest[0] < 2.0


async def test_the_last_record_alone_says_it_ends_the_file(store: Store) -> None:
    text = " ".join(f"word{n}." for n in range(60))
    cast = await submit_text(store, text)
    async with running(make_worker(store)):
        await wait_ended(store, [cast])
    stream = await records(store, cast_stream(cast))
    audio = [audio_chunk(r) for r in stream if event_of(r) == Event.AUDIO]
    assert audio[-1].planned == audio[-1].index + 1
    assert all(a.planned > a.index + 1 for a in audio[:-1])
    assert len({a.plan for a in audio}) == len(audio)  # each chunk ends somewhere new


async def test_a_burst_of_casts_is_admitted_by_capacity_not_before_each_is_planned(
    store: Store,
) -> None:
    # Admitted casts count for admission before their first chunk is planned (by the
    # planner's estimate of their text): the second waits for the first one's first audio,
    # as it would if the first had been planned whole at once.
    ids = [await submit_text(store, f"cast {name} says hello to everyone") for name in "abc"]
    gate = threading.Event()
    engine = GatedEngine("cast a", gate)
    async with running(make_worker(store, engine)):
        try:
            await asyncio.to_thread(engine.blocked.wait, 10)
            started = [
                any(event_of(r) == Event.START for r in await records(store, cast_stream(cid)))
                for cid in ids
            ]
        finally:
            gate.set()  # before the worker stops: it waits for the engine's chunk
        assert started == [True, False, False]
        await wait_ended(store, ids)
