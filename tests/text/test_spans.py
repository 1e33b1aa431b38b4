"""Spans: where each unit's phonemes sit in its chunk, found at planning (pure, on synthetic
units); tests/engine/test_timing.py places them in the audio."""

from __future__ import annotations

import itertools
import re

from hypothesis import given, settings

from speechd.text import ChunkPolicy
from speechd.text._chunks import Unit, iter_chunks
from speechd.text._spans import word_spans

from .test_chunks import POLICIES, texts, units_of


def test_spans_point_at_each_words_phonemes_without_edge_punctuation() -> None:
    units = [
        Unit("Hello, ", "halO, "),
        Unit("\u2014 ", "\u2014 "),  # punctuation only: shares the pause
        Unit("big  ", "big  "),  # a double space collapses when joined
        Unit("(new) ", "(nu) "),
        Unit("\U0001f600 ", ""),  # no phonemes: no span
        Unit("world.", "wOrld."),
    ]
    phonemes = re.sub(" {2,}", " ", "".join(u.phonemes for u in units)).strip()
    spans = word_spans(units, phonemes)
    assert [s.text for s in spans] == ["Hello,", "big", "(new)", "world."]
    assert [phonemes[s.start : s.end] for s in spans] == ["halO", "big", "nu", "wOrld"]


def test_spans_stop_where_a_truncated_chunk_ends() -> None:
    units = [Unit("one ", "wan "), Unit("two ", "tu "), Unit("three", "Tri")]
    assert [s.text for s in word_spans(units, "wan tu")] == ["one", "two"]


@given(texts(), POLICIES)
@settings(max_examples=80)
def test_every_chunk_spans_its_words_in_order(words: list[str], policy: ChunkPolicy) -> None:
    for chunk in iter_chunks(units_of(words), policy):
        assert [s.text for s in chunk.words] == chunk.text.split()
        for span in chunk.words:
            assert chunk.phonemes[span.start : span.end] == re.sub(r"[^a-z]", "", span.text.lower())
        assert all(a.end < b.start for a, b in itertools.pairwise(chunk.words))
