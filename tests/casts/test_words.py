"""A cast's words (`CastWords`, `cast_captions`): read without bodies and learnt once, so a
request costs the head and the records appended since the last one, whatever the cast's
length or format; a new attempt, or the cast made again under its id, is learnt afresh."""

from __future__ import annotations

import asyncio

import pytest

from speechd.casts import CastWords
from speechd.casts._records import meta_record
from speechd.casts._words import cast_captions
from speechd.casts.schema import (
    AudioChunk,
    Failure,
    Meta,
    RecordSpan,
    Start,
    Word,
    audio_record,
    cast_stream,
    error_record,
    start_record,
)
from speechd.durable import Store
from speechd.errors import CastFailed, CastNotFound
from tests.support.counting import CountingStore

CID = "AAAAAAAAAAAAAAAAAAAAAA"
BODY = b"\x01" * 200_000  # a few seconds of wav: what a growing cast's reads used to carry
META = Meta("kokoro", "af_heart", 1.0, "wav", 24_000, "t", 0, 10)


def chunk(attempt: int, index: int, start_seq: int, label: str) -> AudioChunk:
    words = (Word(0, 100, f"{label}{index}a"), Word(150, 300, f"{label}{index}b"))
    return AudioChunk(
        attempt=attempt,
        index=index,
        planned=index + 2,
        offset_ms=index * 400,
        duration_ms=400,
        text=f"{label}{index}a {label}{index}b",
        body=BODY,
        words=words,
        unit="word",
        start_seq=start_seq,
    )


async def begin(store: Store, cast_id: str = CID) -> None:
    await store.append(cast_stream(cast_id), [meta_record(META)])
    await store.append(cast_stream(cast_id), [start_record(Start(1, "w1", 0))])


async def add(store: Store, attempt: int, index: int, start_seq: int, label: str = "w") -> None:
    await store.append(cast_stream(CID), [audio_record(chunk(attempt, index, start_seq, label))])


def expected(labels: list[tuple[str, int]]) -> list[tuple[str, int, int]]:
    out = []
    for n, (label, index) in enumerate(labels):
        at = n * 400
        out += [(f"{label}{index}a", at, at + 100), (f"{label}{index}b", at + 150, at + 300)]
    return out


def seen(captions: object) -> list[tuple[str, int, int]]:
    return [(w.text, w.start_ms, w.end_ms) for w in captions.words]  # type: ignore[attr-defined]


async def test_each_request_reads_only_the_head_and_what_is_new(store: Store) -> None:
    counting = CountingStore(store)
    words = CastWords(counting)
    await begin(store)
    costs = []
    for index in range(40):
        await add(store, 1, index, 1)
        before = counting.read_bytes
        captions = await words.captions(CID)
        costs.append(counting.read_bytes - before)
        assert seen(captions) == expected([("w", i) for i in range(index + 1)])
        assert captions.unit == "word" and captions.audio_ms == 400 * (index + 1)
    # No body is ever read: the head and one new record's headers, a kilobyte or two,
    # the same at the 40th record as at the first (reading the audio: 200 kB per record).
    assert max(costs) < 4_000, costs
    assert max(costs[20:]) <= max(costs[:5]) + 200
    before = counting.read_bytes
    await words.captions(CID)
    assert counting.read_bytes - before < 2_000  # nothing new: the head alone


async def test_a_new_attempt_keeps_what_it_keeps_and_learns_the_rest(store: Store) -> None:
    counting = CountingStore(store)
    words = CastWords(counting)
    await begin(store)
    for index in range(5):
        await add(store, 1, index, 1)  # seqs 2..6
    assert len((await words.captions(CID)).words) == 10
    # Attempt 2 keeps the first three records (seqs 2..4) and makes its own from index 3.
    kept = [RecordSpan(2, 0, 3)]
    await store.append(cast_stream(CID), [start_record(Start(2, "w2", 0, keep=3, kept=kept))])
    await add(store, 2, 3, 7, "v")
    await add(store, 2, 4, 7, "v")
    before = counting.read_bytes
    captions = await words.captions(CID)
    assert seen(captions) == expected([("w", 0), ("w", 1), ("w", 2), ("v", 3), ("v", 4)])
    assert counting.read_bytes - before < 6_000
    # A reader that never saw attempt 1 gets the same.
    assert seen(await cast_captions(store, CID)) == seen(captions)


async def test_a_cast_made_again_under_its_id_is_learnt_afresh(store: Store) -> None:
    words = CastWords(store)
    await begin(store)
    await add(store, 1, 0, 1, "old")
    assert seen(await words.captions(CID)) == expected([("old", 0)])
    await store.delete(cast_stream(CID))  # removed by retention, and made again
    await asyncio.sleep(0.01)  # a later birth, by the store's clock
    await begin(store)
    await add(store, 1, 0, 1, "new")
    assert seen(await words.captions(CID)) == expected([("new", 0)])


async def test_callers_asking_at_once_share_one_reading(store: Store) -> None:
    counting = CountingStore(store)
    words = CastWords(counting)
    await begin(store)
    for index in range(30):
        await add(store, 1, index, 1)
    alone = CountingStore(store)
    await CastWords(alone).captions(CID)
    answers = await asyncio.gather(*(words.captions(CID) for _ in range(60)))
    assert all(seen(a) == expected([("w", i) for i in range(30)]) for a in answers)
    # One full reading and, at most, one more head for those who asked while it ran.
    assert counting.read_bytes <= alone.read_bytes * 2 + 4_000


async def test_the_cache_is_bounded(store: Store) -> None:
    """A cast that fell out of the cache (the least recently asked for, past `max_casts`;
    alone over `max_words`) is read whole again when next asked for."""
    await begin(store)
    for index in range(10):
        await add(store, 1, index, 1)
    others = [f"{c}" * 22 for c in "BC"]
    for cid in others:
        await begin(store, cid)
    counting = CountingStore(store)
    words = CastWords(counting, max_casts=2)
    await words.captions(CID)
    whole = counting.read_bytes
    await words.captions(CID)
    assert counting.read_bytes - whole < whole / 2  # kept
    for cid in others:
        await words.captions(cid)
    before = counting.read_bytes
    await words.captions(CID)
    assert counting.read_bytes - before >= whole * 0.9  # fell out, read again
    small = CastWords(counting, max_words=3)
    assert len((await small.captions(CID)).words) == 20
    before = counting.read_bytes
    assert len((await small.captions(CID)).words) == 20
    assert counting.read_bytes - before >= whole * 0.9  # never kept


async def test_missing_and_failed_casts(store: Store) -> None:
    words = CastWords(store)
    with pytest.raises(CastNotFound):
        await words.captions(CID)
    await begin(store)
    await add(store, 1, 0, 1)
    await store.append(cast_stream(CID), [error_record(1, Failure("boom", 1), 1)])
    with pytest.raises(CastFailed, match="boom"):
        await words.captions(CID)
