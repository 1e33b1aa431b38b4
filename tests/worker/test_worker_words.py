"""The worker puts each chunk's word timings into its audio records (`w`, `u`), and readers
add them up into cast-level times that match the audio, across records and attempts."""

from __future__ import annotations

import itertools

from harness.engines import SAMPLE_RATE, CostEngine, FakeChunkPolicy, fake_words
from speechd.casts import record_words
from speechd.casts._records import H_UNIT, H_WORDS, Word, audio_chunk
from speechd.casts._words import cast_captions
from speechd.casts.schema import AudioChunk, audio_record, cast_stream
from speechd.durable import Record, Store
from speechd.engine._timing import WordTiming

from ._helpers import check_layout, make_worker, records, running, submit_text, wait_ended

TEXT = "Alpha bravo. Charlie delta echo foxtrot. Golf hotel india juliett kilo lima mike."


def expected_words(text: str, engine: CostEngine, speed: float = 1.0) -> list[tuple[str, int]]:
    """(word, cast-level start in ms) as the cost model times them, chunk after chunk."""
    out, at = [], 0
    for chunk in engine.plan(text, "af_heart", FakeChunkPolicy()):
        samples = round(engine.audio_s(chunk.text, speed) * SAMPLE_RATE)
        out += [(w.text, at + w.start) for w in fake_words(chunk.text, samples)]
        at += samples
    return [(text, samples * 1000 // SAMPLE_RATE) for text, samples in out]


def check_record_words(audio: list[Record]) -> None:
    for record in audio:
        chunk = audio_chunk(record)
        for word in chunk.words:
            assert 0 <= word.start_ms <= word.end_ms <= chunk.duration_ms
        assert all(a.end_ms <= b.start_ms for a, b in itertools.pairwise(chunk.words))


async def test_audio_records_carry_their_words(store: Store) -> None:
    cid = await submit_text(store, TEXT, speed=1.5)
    async with running(make_worker(store)):
        await wait_ended(store, [cid])
    audio = check_layout(await records(store, cast_stream(cid)))[-1][1:]
    check_record_words(audio)
    chunks = [audio_chunk(r) for r in audio]
    assert [w.text for c in chunks for w in c.words] == TEXT.split()
    assert {r.header(H_UNIT) for r in audio} == {b"word"}
    assert (audio[0].header(H_WORDS) or b"").startswith(b"[[0,")
    captions = await cast_captions(store, cid)
    got = [(w.text, w.start_ms) for w in captions.words]
    want = expected_words(TEXT, CostEngine(), speed=1.5)
    assert [w for w, _ in got] == [w for w, _ in want]
    assert all(abs(a - b) <= 2 for (_, a), (_, b) in zip(got, want, strict=True))
    assert captions.unit == "word"
    assert captions.audio_ms == sum(c.duration_ms for c in chunks)


async def test_cast_times_add_up_across_attempts(store: Store) -> None:
    text = "Alpha bravo. Charlie delta echo foxtrot. FLAKY hotel india juliett kilo lima mike."
    cid = await submit_text(store, text)
    async with running(make_worker(store)):
        await wait_ended(store, [cid])
    attempts = check_layout(await records(store, cast_stream(cid)))
    assert len(attempts) == 2  # the third chunk failed once
    check_record_words(attempts[-1][1:])
    captions = await cast_captions(store, cid)
    want = expected_words(text, CostEngine())
    assert [w.text for w in captions.words] == [w for w, _ in want]
    assert all(
        abs(w.start_ms - start) <= 2 for w, (_, start) in zip(captions.words, want, strict=True)
    )
    assert all(a.start_ms <= b.start_ms for a, b in itertools.pairwise(captions.words))


async def test_a_split_chunk_gives_each_record_the_words_that_start_in_it(store: Store) -> None:
    # At 0.25x speed this one chunk is 32 s of audio: three records of at most 15 s.
    engine = CostEngine(audio_per_char=0.5)
    text = "aaaaaaa bbbbbbbb"
    cid = await submit_text(store, text, speed=0.25)
    async with running(make_worker(store, engine)):
        await wait_ended(store, [cid])
    audio = check_layout(await records(store, cast_stream(cid)))[-1][1:]
    assert len(audio) == 3
    check_record_words(audio)
    assert [[w.text for w in audio_chunk(r).words] for r in audio] == [
        ["aaaaaaa"],
        ["bbbbbbbb"],
        [],
    ]
    first = audio_chunk(audio[0])
    assert first.words[0].end_ms == first.duration_ms  # it ran past its record: cut there
    captions = await cast_captions(store, cid)
    samples = round(engine.audio_s(text, 0.25) * SAMPLE_RATE)
    _, second = fake_words(text, samples)
    assert abs(captions.words[1].start_ms - second.start * 1000 / SAMPLE_RATE) <= 2


def test_record_words_take_the_words_that_start_in_the_record() -> None:
    words = [WordTiming("a", 0, 2400), WordTiming("b", 2400, 4800), WordTiming("c", 4800, 4800)]
    assert record_words(words, 0, 2400, 100, 24_000, final=False) == (Word(0, 100, "a"),)
    assert record_words(words, 2400, 4800, 100, 24_000, final=True) == (
        Word(0, 100, "b"),
        Word(100, 100, "c"),  # at the very end of the last record: still its word
    )


def test_records_without_or_with_a_broken_words_header_still_read() -> None:
    chunk = AudioChunk(1, 0, 1, 0, 500, "hi", b"x")
    record = audio_record(chunk)
    assert all(k not in (H_WORDS, H_UNIT) for k, _ in record.headers)
    assert audio_chunk(Record(0, 0, record.headers, record.body)) == chunk
    timed = audio_record(AudioChunk(1, 0, 1, 0, 500, "hi", b"x", (Word(0, 400, "hi"),), "word"))
    assert dict(timed.headers)[H_WORDS] == b'[[0,400,"hi"]]'
    broken = tuple((k, b"[[0," if k == H_WORDS else v) for k, v in timed.headers)
    parsed = audio_chunk(Record(0, 0, broken, b"x"))
    assert (parsed.words, parsed.unit, parsed.body) == ((), "", b"x")
