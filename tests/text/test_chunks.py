"""Progressive chunk planning, on synthetic units (pure) and through the real English G2P."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from speechd.engine import Engine
from speechd.text import Chunk, ChunkPolicy
from speechd.text._chunks import MODEL_MAX_TOKENS, Chunker, Unit, iter_chunks
from speechd.text._slices import normalize_text

WORD = st.text("abcdefghijklmnopqrstuvwxyz", min_size=2, max_size=12)  # 1 letter + "." = initial
PUNCT = st.sampled_from(["", "", "", "", ",", ".", ";", "!", "?", ":"])


def units_of(words: list[str], *, phonemes_per_char: int = 1) -> list[Unit]:
    """One unit per word; phonemes are the word's letters (times a factor) plus punctuation."""
    units = []
    for word in words:
        letters = re.sub(r"[^a-z]", "", word.lower()) * phonemes_per_char
        tail = word[-1] if word[-1] in ",.;!?:" else ""
        units.append(Unit(word + " ", letters + tail + " "))
    if units:
        units[-1].block_end = True
    return units


def words_of(chunks: list[Chunk]) -> list[str]:
    return " ".join(c.text for c in chunks).split()


@st.composite
def texts(draw: st.DrawFn) -> list[str]:
    words = draw(st.lists(st.tuples(WORD, PUNCT), min_size=1, max_size=400))
    out = []
    capital = True
    for word, punct in words:
        out.append((word.capitalize() if capital else word) + punct)
        capital = punct in ".!?"
    return out


POLICIES = st.builds(
    ChunkPolicy,
    rtf=st.sampled_from([0.0, 0.02, 0.3, 0.7, 0.95, 1.5]),
    speed=st.sampled_from([0.25, 1.0, 4.0]),
)


@given(texts(), POLICIES, st.sampled_from([1, 3, 8]))
@settings(max_examples=150)
def test_chunks_cover_the_text_in_order_within_the_token_limit(
    words: list[str], policy: ChunkPolicy, factor: int
) -> None:
    chunks = list(iter_chunks(units_of(words, phonemes_per_char=factor), policy))
    assert words_of(chunks) == words
    assert [c.index for c in chunks] == list(range(len(chunks)))
    for chunk in chunks:
        assert 0 < len(chunk.phonemes) <= MODEL_MAX_TOKENS
        assert chunk.phonemes == chunk.phonemes.strip() and "  " not in chunk.phonemes
    first_word_tokens = len(units_of(words[:1], phonemes_per_char=factor)[0].phonemes) - 1
    assert chunks[0].tokens <= max(policy.first_max_tokens, first_word_tokens)


@given(texts())
def test_the_first_chunk_is_short_and_ends_at_a_boundary(words: list[str]) -> None:
    policy = ChunkPolicy()
    chunks = list(iter_chunks(units_of(words), policy))
    first = chunks[0]
    assert first.tokens <= policy.first_max_tokens or len(first.text.split()) == 1
    rest = words[len(first.text.split()) :]
    if not rest:
        return
    punctuated = [i for i, w in enumerate(words) if w[-1] in ",.;!?:"]
    # If a clause ends between first_min_tokens and first_max_tokens, the first chunk ends there.
    cost = 0
    for i, word in enumerate(words):
        cost += len(word.rstrip(",.;!?:")) + (1 if word[-1] in ",.;!?:" else 0) + (i > 0)
        if cost > policy.first_max_tokens:
            break
        if i in punctuated and cost >= policy.first_min_tokens:
            assert len(first.text.split()) == i + 1
            break


def test_chunks_grow_from_a_clause_to_a_sentence_to_several() -> None:
    sentence = "A quick brown fox jumps, and then it runs far away over the hills."
    words = (sentence + " ") * 40
    chunks = list(iter_chunks(units_of(words.split()), ChunkPolicy(rtf=0.05)))
    assert chunks[0].text == "A quick brown fox jumps,"
    assert chunks[1].text == "and then it runs far away over the hills."
    assert all(c.text.endswith(".") for c in chunks[1:])
    assert max(c.tokens for c in chunks[2:]) > 150  # several sentences at once
    assert all(c.tokens <= 250 for c in chunks)


def test_growth_is_bounded_by_the_buffer_at_the_measured_rtf() -> None:
    words = ("word " * 3000).split()
    for rtf in (0.3, 0.7, 0.9):
        policy = ChunkPolicy(rtf=rtf)
        chunks = list(iter_chunks(units_of(words), policy))
        buffered = 0.0
        for chunk in chunks:
            if chunk.index > 0:
                allowed = policy.margin * buffered / rtf
                fits = policy.audio_s(chunk.tokens) <= allowed
                assert fits or chunk.tokens <= policy.floor_tokens
            buffered = policy.after(chunk.index, buffered, chunk.tokens)
        sizes = [c.tokens for c in chunks]
        grown = max(sizes[20:])  # it grows, however slowly, up to max_tokens
        assert sizes[1] < max(sizes[5:20]) < grown or max(sizes[5:20]) >= policy.max_tokens - 5
        assert max(sizes) <= policy.max_tokens


def test_a_slow_device_makes_the_plan_grow_more_slowly() -> None:
    words = ("word " * 600).split()
    fast = list(iter_chunks(units_of(words), ChunkPolicy(rtf=0.05)))
    slow = list(iter_chunks(units_of(words), ChunkPolicy(rtf=0.8)))
    assert fast[0].tokens <= slow[0].tokens <= ChunkPolicy().first_max_tokens
    assert sum(c.tokens for c in fast[:4]) > 2 * sum(c.tokens for c in slow[:4])
    assert len(slow) > len(fast)


def test_the_per_chunk_overhead_is_paid_from_the_buffer() -> None:
    words = ("word, " * 600).split()
    lean = ChunkPolicy(rtf=0.45)
    costly = lean.with_rtf(0.45, overhead_s=0.5)
    # The first chunk buys what a floor-sized second chunk costs, with the margin.
    first = next(iter_chunks(units_of(words), costly))
    assert costly.audio_s(first.tokens) * costly.margin >= costly.compute_s(costly.floor_tokens)
    assert first.tokens > next(iter_chunks(units_of(words), lean)).tokens
    # Every later chunk costs at most margin * buffered, overhead included, unless it is at
    # the floor; and the buffer never runs out in the simulation.
    buffered = 0.0
    for chunk in iter_chunks(units_of(words), costly):
        if chunk.index > 0:
            cost = costly.compute_s(chunk.tokens)
            assert cost <= costly.margin * buffered or chunk.tokens <= costly.floor_tokens
            assert cost < buffered
        buffered = costly.after(chunk.index, buffered, chunk.tokens)


def test_a_costly_share_never_plans_chunks_that_drain_the_buffer() -> None:
    # Sharing the device with a listener doubles a chunk's wall-clock cost: floor-sized
    # chunks would cost more than the audio they add, so the smallest budget rises.
    shared = ChunkPolicy().with_rtf(0.76, overhead_s=0.4)
    least = shared.least_tokens
    assert least > shared.floor_tokens
    assert shared.budget(3, 0.0) == least
    assert shared.audio_s(least) - shared.compute_s(least) > 0
    assert ChunkPolicy().with_rtf(0.38, overhead_s=0.2).least_tokens == ChunkPolicy().floor_tokens


def test_max_chunk_s_caps_every_chunk_but_the_floor() -> None:
    words = ("word " * 3000).split()
    capped = list(iter_chunks(units_of(words), ChunkPolicy().with_rtf(0.05, max_chunk_s=4.0)))
    assert max(c.tokens for c in capped) <= ChunkPolicy().tokens(4.0)
    assert max(c.tokens for c in capped[5:]) >= ChunkPolicy().tokens(4.0) - 5  # it fills the cap
    tiny = list(iter_chunks(units_of(words), ChunkPolicy().with_rtf(0.05, max_chunk_s=0.1)))
    assert max(c.tokens for c in tiny[1:]) <= ChunkPolicy().floor_tokens
    # A share that cannot keep its listener ahead does not lift the cap (the quantum).
    crowded = ChunkPolicy().with_rtf(0.97, overhead_s=0.67, max_chunk_s=4.0)
    assert crowded.least_tokens > crowded.tokens(4.0)
    assert max(c.tokens for c in iter_chunks(units_of(words), crowded)) <= crowded.tokens(4.0)


@pytest.mark.parametrize("share", [1.25, 1.5, 1.75, 2.0, 2.4])
def test_a_shared_device_plans_no_more_chunks_than_a_lone_one(share: float) -> None:
    # Budgeted where the buffer stops growing, chunks cut at a comma below the budget once kept
    # a cast that shares the device at ~1.5 s chunks to its end, paying the overhead each time.
    sentence = "A quick brown fox jumps, and then it runs far away over the hills."
    units = units_of(((sentence + " ") * 60).split())
    lone = ChunkPolicy().with_rtf(0.41, overhead_s=0.28, max_chunk_s=5.4)
    shared = lone.with_rtf(0.41 * share, overhead_s=0.28 * share, max_chunk_s=5.4)
    assert len(list(iter_chunks(units, shared))) <= len(list(iter_chunks(units, lone))) + 3


def test_slower_than_real_time_drops_the_buffer_bound() -> None:
    words = ("word " * 600).split()
    chunks = list(iter_chunks(units_of(words), ChunkPolicy(rtf=1.5)))
    assert chunks[1].tokens > 100 and chunks[2].tokens > 200


def test_with_rtf_and_with_speed_return_new_policies() -> None:
    policy = ChunkPolicy()
    assert policy.with_rtf(0.02).rtf == 0.02 and policy.rtf == ChunkPolicy().rtf
    assert policy.with_rtf(-1).rtf == 0.0
    timed = policy.with_rtf(0.4, overhead_s=0.5, max_chunk_s=5.0)
    assert (timed.overhead_s, timed.max_chunk_s) == (0.5, 5.0)
    assert policy.with_rtf(0.4).overhead_s == 0.0
    assert policy.with_speed(2.0).audio_s(100) == pytest.approx(policy.audio_s(100) / 2)


def test_an_overlong_sentence_is_split_at_spaces_under_the_limit() -> None:
    words = [f"w{i % 97}abcdefgh" for i in range(500)]  # ~5,000 characters, no punctuation
    policy = ChunkPolicy(max_tokens=MODEL_MAX_TOKENS, sentence_tokens=MODEL_MAX_TOKENS, rtf=0)
    chunks = list(iter_chunks(units_of(words), policy))
    assert words_of(chunks) == words
    assert all(c.tokens <= MODEL_MAX_TOKENS for c in chunks)
    assert max(c.tokens for c in chunks) > 450


def test_a_single_monster_word_is_truncated_not_split() -> None:
    chunks = list(iter_chunks(units_of(["a" * 2000, "end."]), ChunkPolicy()))
    assert chunks[0].text == "a" * 2000 and chunks[0].tokens == MODEL_MAX_TOKENS
    assert chunks[1].text == "end."


def test_units_without_phonemes_ride_along_and_empty_text_plans_nothing() -> None:
    units = [Unit("Hello ", "hɛlO "), Unit("* ", " "), Unit("world. ", "wɜɹld. "), Unit("# ", "")]
    chunks = list(iter_chunks(units, ChunkPolicy(min_tokens=1)))
    assert words_of(chunks) == ["Hello", "*", "world.", "#"]
    assert all(c.phonemes for c in chunks)
    assert list(iter_chunks([Unit("* ", " "), Unit("🎉", "")], ChunkPolicy())) == []
    assert list(iter_chunks([], ChunkPolicy())) == []


def test_planning_is_lazy() -> None:
    pulled = 0

    def source() -> object:
        nonlocal pulled
        for word in ("Some words here, then more. " * 10_000).split():
            pulled += 1
            yield Unit(word + " ", word + " ")

    first = next(iter_chunks(source(), ChunkPolicy(rtf=0)))  # type: ignore[arg-type]
    assert first.text == "Some words here,"
    assert pulled < 100


# ------------------------------------------------------------------ through the real G2P


def test_english_plans_keep_words_whole_and_cover_the_text(tiny_engine: Engine) -> None:
    text = (
        "Dr. Smith paid $5.50 on 2024-01-15 at 3:30pm, didn't he? "
        "The U.S. team won 3-2; fans cheered for 10 minutes!\n\n"
        "# A heading\n- an item with **bold** text 😀"
    )
    chunks = tiny_engine.plan(text, "af_heart")
    assert words_of(chunks) == normalize_text(text).split()
    assert all(0 < c.tokens <= MODEL_MAX_TOKENS for c in chunks)
    assert not any(c.text.endswith(("Dr.", "U.S.")) for c in chunks[:-1])


@given(
    st.text(
        st.sampled_from(list("abcdefghij klmnop QRST 0123456789 .,;:!?'-\n")),
        min_size=1,
        max_size=400,
    )
)
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_english_plans_cover_any_normalised_text(tiny_engine: Engine, text: str) -> None:
    chunks = tiny_engine.plan(text, "af_heart")
    normalized = normalize_text(text)
    if not chunks:  # misaki reads some digit strings ("00") as nothing at all
        assert not any(c.isalpha() for c in normalized)
        return
    assert words_of(chunks) == normalized.split()
    assert all(0 < c.tokens <= MODEL_MAX_TOKENS for c in chunks)
    assert chunks[0].tokens <= ChunkPolicy().first_max_tokens or len(chunks[0].text.split()) == 1


def test_only_emoji_plans_nothing(tiny_engine: Engine) -> None:
    assert tiny_engine.plan("😀 🎉 👍🏽", "af_heart") == []


def test_a_long_unpunctuated_english_text_splits_under_the_limit(tiny_engine: Engine) -> None:
    text = " ".join(["banana", "orange", "table", "window", "river"] * 170)  # ~5,000 chars
    chunks = tiny_engine.plan(text, "af_heart", ChunkPolicy(rtf=0))
    assert words_of(chunks) == text.split()
    assert all(c.tokens <= MODEL_MAX_TOKENS for c in chunks)


def test_french_plans_through_espeak(tiny_engine: Engine) -> None:
    text = "Bonjour tout le monde. Comment allez-vous aujourd'hui? Très bien, merci."
    chunks = tiny_engine.plan(text, "ff_siwis")
    assert words_of(chunks) == text.split()
    assert chunks[0].text == "Bonjour tout le monde."
    assert all(c.phonemes for c in chunks)


def test_planning_200k_characters_is_quick_and_lazy(tiny_engine: Engine) -> None:
    sentence = "The quick brown fox jumps over the lazy dog near the riverbank. "
    text = sentence * (200_000 // len(sentence))
    started = time.perf_counter()
    first = next(tiny_engine.iter_plan(text, "af_heart"))
    assert time.perf_counter() - started < 5
    assert first.index == 0 and first.tokens <= ChunkPolicy().first_max_tokens


def test_titles_and_initials_do_not_end_sentences_but_no_does() -> None:
    policy = ChunkPolicy(min_tokens=1, rtf=0)
    first = next(iter_chunks(units_of(["Dr.", "J.", "Watson", "left.", "Then"]), policy))
    assert first.text == "Dr. J. Watson left."
    first = next(iter_chunks(units_of(["I", "said", "no.", "Then", "we", "went", "home."]), policy))
    assert first.text == "I said no."


def test_english_cuts_fall_between_phrases_not_inside_them(tiny_engine: Engine) -> None:
    text = "The old man walked slowly along the quiet beach as the sun went down tonight."
    chunks = tiny_engine.plan(text, "af_heart", ChunkPolicy().with_rtf(0.9))
    leaning = {"the", "a", "an", "quiet", "old", "along", "as"}
    assert len(chunks) > 2
    assert not any(c.text.split()[-1].lower() in leaning for c in chunks)


# -- past the quantum when nobody waits, and the rest estimated ------------------------------


def test_a_lone_cast_grows_past_the_quantum_and_a_newcomer_brings_it_back() -> None:
    # A 2-core CPU: 0.3 s a call + 0.4 s per audio second. The quantum (2.5 s of compute)
    # caps chunks at 5.5 s of audio; a cast alone plans with the cap lifted.
    units = units_of(("Some words are here, and then a few more of them follow on. " * 80).split())
    capped = ChunkPolicy().with_rtf(0.4, overhead_s=0.3, max_chunk_s=5.5)
    lone = ChunkPolicy().with_rtf(0.4, overhead_s=0.3)
    quantum = 0.3 + 0.4 * 5.5
    assert max(capped.compute_s(c.tokens) for c in iter_chunks(units, capped)) <= quantum + 1e-9
    grown = list(iter_chunks(units, lone))
    assert max(lone.compute_s(c.tokens) for c in grown) > 2 * quantum
    assert len(grown) < len(list(iter_chunks(units, capped))) / 2
    # Mid-plan, a newcomer: the chunks cut from then on keep to the quantum again.
    chunker = Chunker(lone)
    for unit in units:
        chunker.push(unit)
    before = [chunker.cut() for _ in range(8)]
    assert max(lone.compute_s(c.tokens) for c in before if c) > 2 * quantum
    chunker.policy = capped
    after = [chunker.cut() for _ in range(8)]
    assert all(c is not None and capped.compute_s(c.tokens) <= quantum + 1e-9 for c in after)


def test_the_estimate_of_the_rest_follows_the_budgets() -> None:
    policy = ChunkPolicy().with_rtf(0.5, overhead_s=0.2)
    sizes = policy.estimate(0, 0.0, 2000)
    assert sum(sizes) == 2000
    assert sizes[0] <= policy.first_max_tokens and max(sizes) <= policy.max_tokens
    assert sizes[:4] == sorted(sizes[:4])  # growing with the simulated buffer
    assert policy.estimate(3, 5.0, 0) == []
    many = policy.estimate(0, 0.0, 10**6, most=50)
    assert len(many) == 50 and sum(many) == 10**6
    slow = ChunkPolicy().with_rtf(1.3, overhead_s=0.4)
    assert slow.estimate(2, 0.0, 1000)[0] == int(slow.max_tokens * 0.75)
    # Cut at sentence ends as the chunker cuts: the second chunk at the first within its
    # budget, later ones at the latest (a rest that fits is one chunk: its end is one).
    assert slow.estimate(2, 0.0, slow.max_tokens + 1) == [slow.max_tokens + 1]
    assert len(slow.estimate(2, 0.0, slow.max_tokens + 2)) == 2
    assert slow.estimate(1, 0.0, 400, ends=[4, 70, 110, 190, 240, 330]) == [70, 170, 160]
    assert slow.estimate(2, 0.0, 400, ends=[120]) == [120, 187, 93]  # none within the 2nd: 3/4


def test_the_chunker_knows_where_the_sentences_in_its_window_end() -> None:
    chunker = Chunker(ChunkPolicy())
    words = "One two. Three four, five. six Seven."
    units = [Unit(w + " ", w.lower().strip(".,") + " ") for w in words.split()]
    for unit in units:
        chunker.push(unit)
    assert chunker.sentence_ends() == [8, 34]  # "five." before a lowercase word is no end
