"""Word timings: spans (found at planning: tests/text/test_spans.py) placed by predicted
durations after synthesis (pure, on synthetic units and durations), and through the tiny
model's real synthesis path."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speechd.engine import Engine
from speechd.engine._timing import LEAD_FRAMES, SAMPLES_PER_FRAME, WordTiming, word_timings
from speechd.text import Span

F = SAMPLES_PER_FRAME


def timed(phonemes: str, spans: list[Span], durations: list[int], **kw: object) -> list[tuple]:
    pcm = np.full(sum(durations) * F, 0.5, dtype=np.float32)
    got = word_timings(phonemes, spans, durations, head=kw.pop("head", 0), pcm=pcm, **kw)  # type: ignore[arg-type]
    return [(w.text, w.start, w.end) for w in got]


def test_frames_place_each_word_less_the_lead_and_the_head() -> None:
    # "ab cd": start marker 10 frames, a=2 b=3, space=1, c=4 d=5, end marker 6.
    durations = [10, 2, 3, 1, 4, 5, 6]
    spans = [Span("ab", 0, 2), Span("cd", 3, 5)]
    lead = LEAD_FRAMES * F
    assert timed("ab cd", spans, durations) == [
        ("ab", 10 * F - lead, 15 * F - lead),
        ("cd", 16 * F - lead, 25 * F - lead),
    ]
    head = 6 * F
    assert timed("ab cd", spans, durations, head=head) == [
        ("ab", 10 * F - lead - head, 15 * F - lead - head),
        ("cd", 16 * F - lead - head, 25 * F - lead - head),
    ]


def test_characters_the_model_does_not_read_take_no_frames() -> None:
    durations = [4, 2, 3, 1, 4, 2, 1]  # a b _ c d: the "~" is not in the vocabulary
    spans = [Span("a~b", 0, 3), Span("cd", 4, 6)]
    got = timed("a~b cd", spans, durations, vocab=set("abcd "))
    assert [w[1:] for w in got] == [(1 * F, 6 * F), (7 * F, 13 * F)]


def test_durations_that_do_not_fit_the_phonemes_give_no_timings() -> None:
    assert timed("ab cd", [Span("ab", 0, 2)], [1, 2, 3]) == []
    pcm = np.zeros(10, dtype=np.float32)
    assert word_timings("ab", [Span("ab", 0, 2)], None, head=0, pcm=pcm) == ()


def test_the_last_word_ends_where_the_voice_stops() -> None:
    durations = [4, 2, 10, 1]  # the model stretched the last phoneme with silence
    pcm = np.zeros(sum(durations) * F, dtype=np.float32)
    pcm[: 4 * F] = 0.3
    (word,) = word_timings("ab", [Span("ab", 0, 2)], durations, head=0, pcm=pcm)
    assert (word.start, word.end) == (1 * F, 4 * F)


@given(
    st.lists(st.integers(1, 30), min_size=1, max_size=40),
    st.integers(1, 20),
    st.integers(1, 20),
    st.integers(0, 40),
    st.integers(0, 60),
)
@settings(max_examples=200)
def test_timings_are_monotone_and_inside_the_pcm(
    word_frames: list[int], lead: int, trail: int, head_frames: int, cut_frames: int
) -> None:
    phonemes = " ".join("x" * n for n in word_frames)
    spans, at = [], 0
    for n in word_frames:
        spans.append(Span("w", at, at + n))
        at += n + 1
    durations = [lead, *([1] * len(phonemes)), trail]
    total = sum(durations) * F
    head = min(head_frames * F, total)
    pcm = np.full(max(0, total - head - cut_frames * F), 0.1, dtype=np.float32)
    words = word_timings(phonemes, spans, durations, head=head, pcm=pcm)
    assert len(words) == len(spans)
    for word in words:
        assert 0 <= word.start <= word.end <= len(pcm)
    for a, b in itertools.pairwise(words):
        assert a.end <= b.start


def test_the_tiny_model_times_every_word_of_its_chunks(engine: Engine) -> None:
    """On each runtime (`engine` is the tiny model on torch, then on ONNX Runtime): the word
    timing is the engine's, after the same trim, whichever runtime made the audio."""
    text = "The quick brown fox, who was very tired, jumped over the lazy dog. Then it slept."
    chunks = engine.plan(text, "af_heart")
    assert [s.text for c in chunks for s in c.words] == text.split()
    for chunk in chunks[:2]:
        synthesis = engine.synthesize(chunk, "af_heart", 1.0, seed=chunk.index)
        assert synthesis.unit == "word"
        assert [w.text for w in synthesis.words] == chunk.text.split()
        assert all(isinstance(w, WordTiming) for w in synthesis.words)
        assert all(0 <= w.start <= w.end <= len(synthesis.pcm) for w in synthesis.words)
        assert all(a.end <= b.start for a, b in itertools.pairwise(synthesis.words))


def test_phrase_languages_get_phrase_timings(engine: Engine) -> None:
    try:
        chunks = engine.plan("Bonjour tout le monde, comment allez-vous ?", "ff_siwis")
    except Exception as exc:  # espeak-ng missing here: nothing to check
        pytest.skip(f"no French G2P: {exc}")
    synthesis = engine.synthesize(chunks[0], "ff_siwis", 1.0, seed=0)
    assert synthesis.unit == "phrase"
    assert synthesis.words
    assert len(synthesis.words) < len(chunks[0].text.split())  # phrases, not words
