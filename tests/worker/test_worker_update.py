"""A step's outcome as data (`_update.step_outcome`), driven with synthetic render results as
a scheduler's unit tests drive it: per cast, the records to append (cut to the store's
records and batches, the eos after the last chunk, the start hold on the first audio) and how
the cast moves on, or its chunk's failure; what the device's costs learn. Then the cast's one
writer of its progress (`Admitted.advance`), and the step's appends going out together, on the
worker."""

from __future__ import annotations

import ast
import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from harness.engines import (
    GPU_CURVE,
    CostEngine,
    FakeChunkPolicy,
    FakeEncoder,
    chunked_text,
    expected_audio,
    fake_words,
)
from harness.forwarding import ForwardingStore
from speechd.casts import last_notice
from speechd.casts._records import audio_chunk
from speechd.casts.schema import (
    Eos,
    Event,
    Recipe,
    Start,
    cast_stream,
    decode,
    event_of,
    start_record,
)
from speechd.durable import (
    AppendAck,
    AppendRecord,
    DurableError,
    Limits,
    RecordTooLarge,
    Store,
)
from speechd.worker._batching import ALONE, BatchCosts
from speechd.worker._cast import Admitted, JobRef, Landed, Update
from speechd.worker._continuation import read_resume
from speechd.worker._costs import ChunkTimes, PlanTiming
from speechd.worker._plan import open_plan
from speechd.worker._render import ChunkFailed, Rendered
from speechd.worker._update import StepOutcome, step_outcome

from ._helpers import (
    check_layout,
    complete_audio,
    make_worker,
    records,
    running,
    submit_text,
    wait_ended,
)

RATE = 24_000
ROOT = Path(__file__).resolve().parents[2]


def admitted(
    text: str, *, cid: str = "c1", at_once: bool = False, limits: Limits | None = None
) -> Admitted:
    """A cast just opened (attempt 1, nothing made), its plan stepped until its first chunk
    is ready to render; on a store with `limits` (the contract's maxima unless given)."""
    plan = open_plan(CostEngine(), text, "af_heart", FakeChunkPolicy())
    while not plan.ready:
        plan.step(0.0, 1.0)
    recipe = Recipe(
        text=text, model="kokoro", voice="af_heart", speed=1.0, format="pcm", title="",
        created_ms=0,
    )  # fmt: skip
    return Admitted(
        job=JobRef(0, cid, at_once),
        recipe=recipe,
        plan=plan,
        timing=PlanTiming(1.0),
        start=Start(attempt=1, worker="w1", chunks=1),
        start_seq=1,
        next_seq=2,
        encoder=FakeEncoder("pcm", RATE),
        **({"limits": limits} if limits is not None else {}),
    )


def rendered(
    *pieces_s: float, gen_s: float, text: str = "", batched: int = 1, checkpoint: bytes = b"k1"
) -> Rendered:
    """A chunk as the engine thread hands it back: a piece (encoded, 2 bytes a sample) per
    record it becomes, each `pieces_s` long."""
    sizes = [round(s * RATE) for s in pieces_s]
    words = fake_words(text, sum(sizes)) if text else ()
    pieces = [(n, b"\x01\x02" * n) for n in sizes]
    return Rendered(pieces, checkpoint, gen_s, words, "word" if words else "", batched)


def outcome(
    casts: Sequence[Admitted],
    results: Sequence[Rendered | ChunkFailed],
    times: ChunkTimes | None = None,
    batch_costs: BatchCosts = ALONE,
) -> StepOutcome:
    return step_outcome(
        casts, results, times=times or ChunkTimes(), batch_costs=batch_costs, sample_rate=RATE
    )


def events(update: Update) -> list[str]:
    return [dict(r.headers)[b"e"].decode() for batch in update.batches for r in batch]


def audio(update: Update) -> list:  # type: ignore[type-arg]
    return [audio_chunk(r) for b in update.batches for r in b if dict(r.headers)[b"e"] == b"audio"]


def progress(cast: Admitted) -> tuple:  # type: ignore[type-arg]
    return (
        cast.next_seq, cast.made, cast.samples, cast.gen_s, cast.resume, cast.origin_ms,
        cast.origin_s, cast.start_seq, len(cast.plan.ahead),
    )  # fmt: skip


# -- the outcome, as data ------------------------------------------------------------------


def test_a_batch_where_one_cast_ends_and_another_goes_on() -> None:
    ending = admitted("hello there", cid="a")  # one chunk: its next is its last
    going = admitted(chunked_text(3), cid="b")
    before = [progress(ending), progress(going)]
    times = ChunkTimes()
    step = outcome([ending, going], [rendered(1.0, gen_s=0.4), rendered(0.5, gen_s=0.2)], times)
    # Nothing it was handed changed: the casts move on only as their records land.
    assert [progress(ending), progress(going)] == before
    assert len(times) == 0
    end, on = step.updates
    assert isinstance(end, Update) and isinstance(on, Update)
    assert events(end) == ["audio", "eos"]
    assert end.eos == Eos(chunks=1, audio_ms=1000, gen_ms=400, samples=24000)
    assert decode(end.batches[-1][-1].body, Eos) == end.eos
    assert events(on) == ["audio"] and on.eos is None
    assert audio(end)[0].planned == 1  # `n`: the file ends with it
    assert audio(on)[0].planned > 1
    for cast, update, samples in ((ending, end, RATE), (going, on, RATE // 2)):
        assert update.planned is cast.plan.ahead[0]
        assert (update.made, update.samples) == (1, samples)
        (record,) = audio(update)
        assert (record.index, record.text) == (0, update.planned.chunk.text)
        assert record.plan == update.planned.position
    # The costs learn each chunk made, in the step's order.
    assert [(s.audio_s, s.gen_s) for s in step.learned] == [(1.0, 0.4), (0.5, 0.2)]


def test_applying_the_updates_ends_one_and_moves_the_other_on() -> None:
    ending, going = admitted("hello there", cid="a"), admitted(chunked_text(3), cid="b")
    made = [rendered(1.0, gen_s=0.04), rendered(0.5, gen_s=0.02)]  # a device well ahead
    end, on = outcome([ending, going], made).updates
    assert isinstance(end, Update) and isinstance(on, Update)
    assert end.hold_ms == on.hold_ms == 0
    ending.advance(end, Landed(2, 1_000, 4, 10.0, 10.5), sample_rate=RATE)
    going.advance(on, Landed(2, 1_200, 3, 10.0, 10.6), sample_rate=RATE)
    assert ending.plan.finished and (ending.next_seq, ending.made) == (4, 1)
    assert (going.next_seq, going.made, going.index, going.samples) == (3, 1, 1, RATE // 2)
    assert going.gen_s == pytest.approx(0.02)
    assert going.plan.ahead[0].chunk.index == 1  # the plan moved past the chunk made
    assert going.resume is not None and going.resume.samples == RATE // 2
    # The listeners' clock starts at the first audio (nothing held on a device that keeps up).
    assert (going.origin_ms, going.origin_s) == (1_200, 10.6)


def test_a_held_first_chunk() -> None:
    text = chunked_text(6)
    # A device that makes this chunk at 3x real time: its own cost prices the rest of the
    # cast (the costs learned it before the hold is worked out), so its listener is held.
    fast = ChunkTimes(prior_rtf=0.5)
    slow_chunk = rendered(0.5, gen_s=1.5)
    cast = admitted(text)
    (update,) = outcome([cast], [slow_chunk], fast).updates
    assert isinstance(update, Update)
    assert update.hold_ms > 0 and update.held_ms == update.hold_ms
    assert [r.hold_ms for r in audio(update)] == [update.hold_ms]  # `h`, on its first record
    cast.advance(update, Landed(2, 5_000, 3, 1.0, 1.2), sample_rate=RATE)
    assert cast.origin_ms == 5_000 + update.hold_ms
    assert cast.origin_s == pytest.approx(1.2 + update.hold_ms / 1000)
    # Its creator wanted first audio at once: the hold is stated, its listeners play now.
    (at_once,) = outcome([admitted(text, at_once=True)], [slow_chunk], fast).updates
    assert isinstance(at_once, Update)
    assert (at_once.hold_ms, at_once.held_ms) == (update.hold_ms, 0)
    # A device that keeps up holds nobody; nor is a cast held once it has audio.
    (quick,) = outcome([admitted(text)], [rendered(0.5, gen_s=0.1)], fast).updates
    assert isinstance(quick, Update) and quick.hold_ms == 0
    (later,) = outcome([cast], [slow_chunk], fast).updates
    assert isinstance(later, Update) and later.hold_ms == 0


def test_a_chunk_cut_into_several_records() -> None:
    small = Limits(max_record_bytes=1 << 20, max_batch_records=2, max_batch_bytes=1 << 22)
    cast = admitted(chunked_text(3), limits=small)
    text = cast.plan.ahead[0].chunk.text
    (update,) = outcome([cast], [rendered(0.25, 0.25, 0.5, gen_s=0.3, text=text)]).updates
    assert isinstance(update, Update)
    assert [len(b) for b in update.batches] == [2, 1]  # in the store's own batches
    pieces = audio(update)
    assert [p.index for p in pieces] == [0, 1, 2]
    assert [p.offset_ms for p in pieces] == [0, 250, 500]
    assert [p.duration_ms for p in pieces] == [250, 250, 500]
    assert [p.text for p in pieces] == [text, "", ""]  # the caption rides on the first
    assert {p.planned for p in pieces} == {pieces[0].planned} and pieces[0].planned > 3
    # Only the record that ends the chunk carries the resume checkpoint.
    assert [bool(p.resume) for p in pieces] == [False, False, True]
    assert read_resume(pieces[-1].resume).samples == RATE
    assert update.resume == read_resume(pieces[-1].resume)
    # Each record's words are its own, the chunk's words all told, in order.
    assert [w.text for p in pieces for w in p.words] == text.split()
    assert (update.made, update.samples) == (3, RATE)


def test_records_over_the_store_limits_fail_the_chunk_with_nothing_to_append() -> None:
    tiny = Limits(max_record_bytes=4_096, max_batch_records=10, max_batch_bytes=1 << 20)
    (failed,) = outcome([admitted("hello there", limits=tiny)], [rendered(1.0, gen_s=0.1)]).updates
    assert isinstance(failed, ChunkFailed)
    assert isinstance(failed.cause, RecordTooLarge) and not failed.encoder_intact


def test_a_failed_chunk_fails_alone_and_teaches_the_costs_nothing() -> None:
    a, b = admitted("hello there", cid="a"), admitted(chunked_text(3), cid="b")
    broken = ChunkFailed(RuntimeError("no"), encoder_intact=True)
    step = outcome([a, b], [broken, rendered(0.5, gen_s=0.2)])
    assert step.updates[0] is broken
    assert isinstance(step.updates[1], Update)
    assert [s.audio_s for s in step.learned] == [0.5]


def test_chunks_made_in_a_batch_are_learned_at_what_they_would_cost_alone() -> None:
    # Two alike chunks, predicted to cost as much together as one alone (0.5x per item):
    # each is learned at the batch's measured time, what one would have cost alone.
    casts = [admitted("hello there", cid="a"), admitted("hello there", cid="b")]
    halves = BatchCosts({1: 1.0, 2: 0.5}, 2)
    made = [rendered(1.0, gen_s=0.3, batched=2), rendered(1.0, gen_s=0.3, batched=2)]
    step = outcome(casts, made, batch_costs=halves)
    assert [s.gen_s for s in step.learned] == pytest.approx([0.6, 0.6])
    assert [u.gen_s for u in step.updates if isinstance(u, Update)] == [0.3, 0.3]


# -- the cast's one writer -------------------------------------------------------------------

PROGRESS = {
    "next_seq", "made", "samples", "gen_s", "resume", "origin_ms", "origin_s", "start",
    "start_seq", "encoder", "plan",
}  # fmt: skip


def test_only_advance_writes_a_casts_progress() -> None:
    """Nothing in the worker but `Admitted.advance` assigns a cast's progress, or moves its
    plan past a chunk (`Admitted.promote` restarts a background cast's listeners' clock)."""
    writers = []
    for path in sorted((ROOT / "speechd" / "worker").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                targets: list[ast.expr] = []
                if isinstance(node, ast.Assign):
                    targets = list(node.targets)
                elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                    targets = [node.target]
                elif (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "take"
                    and ast.unparse(node.func.value).endswith("plan")
                ):
                    writers.append((path.name, function.name, "plan.take()"))
                flat = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
                for target in flat:
                    if isinstance(target, ast.Attribute) and target.attr in PROGRESS:
                        writers.append((path.name, function.name, ast.unparse(target)))
    assert writers, "the check finds nothing: it no longer reads the worker"
    found = {(module, function) for module, function, _ in writers}
    assert found == {("_cast.py", "advance"), ("_cast.py", "promote")}


# -- the step's appends, on the worker -------------------------------------------------------

ENGINE = {"rtf": 0.05, "overhead_s": 0.05}
GPU = BatchCosts(GPU_CURVE, 16)
TEXTS = [chunked_text(5).replace("word", f"u{n}x") for n in range(4)]


class Overlaps(ForwardingStore):
    """Counts the appends of audio in flight at once (each takes a little while)."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.flying = 0
        self.most = 0

    async def append(
        self, stream: str, records: Sequence[AppendRecord], *, match_seq_num: int | None = None
    ) -> AppendAck:
        if not any(dict(r.headers).get(b"e") == b"audio" for r in records):
            return await self.inner.append(stream, records, match_seq_num=match_seq_num)
        self.flying += 1
        self.most = max(self.most, self.flying)
        try:
            await asyncio.sleep(0.01)
            return await self.inner.append(stream, records, match_seq_num=match_seq_num)
        finally:
            self.flying -= 1


async def test_a_batchs_records_go_to_the_store_together(store: Store) -> None:
    watched = Overlaps(store)
    engine = CostEngine(batch_curve=GPU_CURVE, **ENGINE)
    ids = [await submit_text(store, text) for text in TEXTS]
    async with running(make_worker(watched, engine, batch_costs=GPU)):
        await wait_ended(store, ids, within=60)
    assert any(len(b) > 1 for b in engine.batches), "no batch formed"
    assert watched.most > 1  # a batch's casts were appended at once, not one after another
    for cid, text in zip(ids, TEXTS, strict=True):
        stream = await records(store, cast_stream(cid))
        assert len(check_layout(stream)) == 1
        assert complete_audio(stream) == expected_audio(cid, text, engine=engine)


class FirstOfABatch(ForwardingStore):
    """Breaks the append of the first chunk of the first batch the worker makes (its notice
    names what is in flight, that chunk first): another worker takes that cast over just
    before (`taken`: its `start` lands first, so the conditional append finds the stream
    moved), or the store fails it. `flight`: the batch's chunks, in the step's order."""

    def __init__(self, inner: Store, *, taken: bool) -> None:
        super().__init__(inner)
        self.taken = taken
        self.flight: list[tuple[str, int]] = []
        self.found = asyncio.Event()

    async def append(
        self, stream: str, records: Sequence[AppendRecord], *, match_seq_num: int | None = None
    ) -> AppendAck:
        audio = [r for r in records if dict(r.headers).get(b"e") == b"audio"]
        if audio and not self.flight and stream.startswith(cast_stream("")):
            found = await last_notice(self.inner, "w1")
            assert found is not None
            flight = [(found[1].cast, found[1].chunk), *found[1].batch]
            first = (stream.removeprefix(cast_stream("")), audio_chunk(audio[0]).index)
            if len(flight) > 1 and flight[0] == first:
                self.flight = flight
                self.found.set()
                if not self.taken:
                    raise DurableError("the store went away")
                start = Start(attempt=9, worker="w2", chunks=1, lease_ms=60_000)
                await self.inner.append(stream, [start_record(start)])
        return await self.inner.append(stream, records, match_seq_num=match_seq_num)


def landed(stream: list) -> list[int]:  # type: ignore[type-arg]
    return [audio_chunk(r).index for r in stream if event_of(r) == Event.AUDIO]


async def test_a_cast_taken_over_mid_batch_is_dropped_alone(store: Store) -> None:
    ids = [await submit_text(store, text) for text in TEXTS]
    watched = FirstOfABatch(store, taken=True)
    engine = CostEngine(batch_curve=GPU_CURVE, **ENGINE)
    async with running(make_worker(watched, engine, batch_costs=GPU, lease_s=60)):
        await asyncio.wait_for(watched.found.wait(), 60)
        victim = watched.flight[0][0]
        others = [cid for cid in ids if cid != victim]
        ends = await wait_ended(watched, others, within=60)
    # Its batch-mates landed, and every other cast was made whole.
    assert set(ends.values()) == {"eos"}
    for cid, text in zip(ids, TEXTS, strict=True):
        stream = await records(store, cast_stream(cid))
        if cid != victim:
            assert complete_audio(stream) == expected_audio(cid, text, engine=engine)
    # Nothing more of this worker's after the other's `start`: it dropped the cast.
    stream = await records(store, cast_stream(victim))
    taken = next(n for n, r in enumerate(stream) if r.header(b"a") == b"9")
    assert [event_of(r) for r in stream[taken:]] == [Event.START]


async def test_a_store_error_for_one_cast_of_a_batch_lands_the_others_first(
    store: Store,
) -> None:
    ids = [await submit_text(store, text) for text in TEXTS]
    broken = FirstOfABatch(store, taken=False)
    engine = CostEngine(batch_curve=GPU_CURVE, **ENGINE)
    worker = make_worker(broken, engine, batch_costs=GPU)
    with pytest.raises(DurableError):  # a store error ends the worker, as ever
        await asyncio.wait_for(worker.run(asyncio.Event()), 30)
    await worker.idle()
    (victim, index), *mates = broken.flight
    assert victim in ids and mates
    assert index not in landed(await records(store, cast_stream(victim)))
    # The step's other chunks are durable: the first one's store error cost them nothing.
    for cid, chunk in mates:
        assert chunk in landed(await records(store, cast_stream(cid))), (cid, chunk)
