"""Hostile text: normalising and planning stay linear whatever the shape of the text.

Wall-clock ceilings here are 10-20x above what linear code needs on a loaded 2-core box, and
far below what the quadratic code they replaced took (a run of `[` took 55 ms at 2,000
characters and 214 ms at 4,000: 30 s or more at 50,000).
"""

from __future__ import annotations

import time

import pytest

from speechd.engine import Engine
from speechd.text import ChunkPolicy
from speechd.text._slices import normalize_text

#: Runs of each character the normaliser reads, and mixes that used to backtrack.
PATTERNS = [
    "[", "(", "1-", "a@", "http://", "*", "_", "#", "<", ".", "1", "-", "`", "~", "&#",
    "![", "[a](", "[](", "<a ", "**a ", "_a ", "a.", "1.", "a-", "1,", "1:", "a.b@", "www.",
    "[[((<<**__``", "# a\n", "- ", "> ", "|", "a,\n", "x\r\n", "\u0301\u0316", "1 pm ",
    "Jan. ", "5 km ", "[a] ", "Inc. ", "&amp;", "   ", "\n",
]  # fmt: skip


def hostile(pattern: str, n: int) -> str:
    return (pattern * (n // len(pattern) + 1))[:n]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_adversarial_texts_normalise_in_linear_time(pattern: str) -> None:
    text = hostile(pattern, 50_000)
    started = time.perf_counter()
    normalize_text(text)
    assert time.perf_counter() - started < 10  # linear: well under 1 s


def test_a_200k_character_word_is_cut_into_words() -> None:
    started = time.perf_counter()
    out = normalize_text("a" * 200_000)
    assert time.perf_counter() - started < 10
    assert max(len(w) for w in out.split()) == 48 and "".join(out.split()) == "a" * 200_000


def test_a_numeric_entity_of_5000_digits_is_read_not_raised() -> None:
    # html.unescape would convert all 5,000 digits (a ValueError on Python 3.11+).
    assert normalize_text("x &#" + "9" * 5000 + "; y").startswith("x \ufffd9")


def test_zalgo_text_keeps_a_few_marks_per_letter() -> None:
    started = time.perf_counter()
    out = normalize_text("a" + "\u0301\u0316" * 40_000 + " b")
    assert time.perf_counter() - started < 10  # NFC sorts marks quadratically
    assert len(out) < 100 and out.endswith(" b")


@pytest.mark.parametrize("pattern", ["[", "1-", "a@", "<", "a.", "[[((<<**__``", "a"])
def test_the_first_chunk_of_a_hostile_text_comes_at_once(tiny_engine: Engine, pattern: str) -> None:
    # The whole 200,000 characters were once normalised before the first chunk.
    text = "Hello there, this is speechd. " + hostile(pattern, 200_000)
    started = time.perf_counter()
    first = next(tiny_engine.iter_plan(text, "af_heart"))
    assert time.perf_counter() - started < 5  # linear and lazy: well under 0.5 s
    assert first.text.startswith("Hello")


def test_a_200k_character_word_plans_to_its_end(tiny_engine: Engine) -> None:
    started = time.perf_counter()
    chunks = tiny_engine.plan("a" * 200_000, "af_heart", ChunkPolicy(rtf=0))
    assert time.perf_counter() - started < 60  # ~3 s
    assert "".join("".join(c.text.split()) for c in chunks) == "a" * 200_000
