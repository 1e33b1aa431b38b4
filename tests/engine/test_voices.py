"""Voice names, OpenAI aliases, blends and languages (torch-free)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from speechd.engine import DEFAULT_VOICE_MAP, VoiceBook
from speechd.engine._voices import installed_voices, parse_spec
from speechd.errors import InvalidRequest, UnknownVoice
from speechd.limits import MAX_BLEND_VOICES, MAX_VOICE_CHARS

INSTALLED = ["af_bella", "af_heart", "af_sky", "am_adam", "bf_emma", "ff_siwis", "jf_alpha"]


@pytest.fixture
def book() -> VoiceBook:
    return VoiceBook(INSTALLED, voice_map=DEFAULT_VOICE_MAP, default_voice="af_heart")


def test_installed_voices_are_the_pt_files(tmp_path: Path) -> None:
    (tmp_path / "voices").mkdir()
    for name in ("af_sky.pt", "am_adam.pt", "notes.txt", "bad name.pt"):
        (tmp_path / "voices" / name).write_bytes(b"")
    assert installed_voices(tmp_path) == ["af_sky", "am_adam"]
    assert installed_voices(tmp_path / "missing") == []


def test_an_installed_voice_resolves_to_itself(book: VoiceBook) -> None:
    assert book.resolve("af_sky") == "af_sky"
    assert book.resolve(" AF_SKY ") == "af_sky"


def test_openai_names_map_to_kokoro_voices(book: VoiceBook) -> None:
    assert book.resolve("ash") == "am_adam"
    assert book.resolve("Shimmer") == "af_sky"


def test_a_mapped_voice_that_is_not_installed_falls_back_to_the_default(book: VoiceBook) -> None:
    assert DEFAULT_VOICE_MAP["nova"] not in INSTALLED
    assert book.resolve("nova") == "af_heart"


def test_the_voice_map_is_configurable_and_may_hold_blends() -> None:
    book = VoiceBook(
        INSTALLED, voice_map={"alloy": "af_bella+af_sky", "echo": "nope"}, default_voice="am_adam"
    )
    assert book.resolve("alloy") == "af_bella(0.5)+af_sky(0.5)"
    assert book.resolve("echo") == "am_adam"
    with pytest.raises(UnknownVoice):
        book.resolve("nova")  # not in this map


def test_blends_normalise_weights_and_order(book: VoiceBook) -> None:
    assert book.resolve("af_bella+af_sky") == "af_bella(0.5)+af_sky(0.5)"
    assert book.resolve("af_sky + af_bella") == "af_sky(0.5)+af_bella(0.5)"
    assert book.resolve("af_bella(2)+af_sky(1)") == "af_bella(0.667)+af_sky(0.333)"
    assert book.resolve("af_bella(1)+af_sky(3)") == "af_sky(0.75)+af_bella(0.25)"
    assert book.resolve("af_bella(0.2)+af_sky(0.8)") == book.resolve("af_sky(4)+af_bella")
    assert book.resolve("af_sky+af_sky") == "af_sky"
    assert book.resolve("af_sky(3)+ash") == "af_sky(0.75)+am_adam(0.25)"


def test_blend_weights_come_back_summing_to_one(book: VoiceBook) -> None:
    weights = book.weights("af_bella+af_sky+am_adam")
    assert [n for n, _ in weights] == ["af_bella", "af_sky", "am_adam"]
    assert sum(w for _, w in weights) == pytest.approx(1.0)


@given(
    st.lists(
        st.tuples(st.sampled_from(INSTALLED), st.integers(min_value=1, max_value=50)),
        min_size=1,
        max_size=6,
    )
)
def test_resolving_is_idempotent_and_weights_sum_to_one(terms: list[tuple[str, int]]) -> None:
    book = VoiceBook(INSTALLED, voice_map=DEFAULT_VOICE_MAP, default_voice="af_heart")
    spec = book.resolve("+".join(f"{name}({weight})" for name, weight in terms))
    assert book.resolve(spec) == spec
    assert sum(w for _, w in book.weights(spec)) == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize(
    "name",
    ["af_nobody", "", "+", "af_sky+", "af_sky(0)", "af_sky(-1)", "af_sky(x)", "af_sky)(", "a b",
     "+".join(["af_sky"] * 9)],
)  # fmt: skip
def test_unknown_or_malformed_voices_list_the_available_ones(book: VoiceBook, name: str) -> None:
    with pytest.raises(UnknownVoice) as caught:
        book.resolve(name)
    error = caught.value
    assert isinstance(error, InvalidRequest)
    assert error.param == "voice" and error.code == "voice_not_found"
    assert "af_heart" in error.message and "alloy" in error.message
    assert name not in book


def test_language_follows_the_first_voice_prefix(book: VoiceBook) -> None:
    assert book.language("af_heart") == "a"
    assert book.language("bf_emma") == "b"
    assert book.language("ff_siwis") == "f"
    assert book.language("jf_alpha") == "j"
    assert book.language("bf_emma+af_heart") == "b"
    assert book.language("bf_emma(1)+af_heart(2)") == "a"  # the heaviest voice leads
    assert book.language("ash") == "a"


def test_custom_voice_names_read_as_american_english() -> None:
    book = VoiceBook(["narrator"], voice_map={}, default_voice="narrator")
    assert book.language("narrator") == "a"


# -- bounds before work: a blend is counted, then parsed in one pass ------------------------

# The grammar as it was written before: the reference the one-pass parser must agree with
# (run here on short strings only, where its backtracking is harmless).
_REFERENCE_TERM = re.compile(
    r"\s*([A-Za-z0-9][A-Za-z0-9_\-]*)\s*(?:\(\s*([0-9]*\.?[0-9]+)\s*\))?\s*"
)


def _reference(spec: str) -> list[tuple[str, float]] | None:
    terms = []
    for part in spec.split("+"):
        match = _REFERENCE_TERM.fullmatch(part)
        if match is None:
            return None
        weight = 1.0 if match.group(2) is None else float(match.group(2))
        if not weight > 0:
            return None
        terms.append((match.group(1), weight))
    return terms if len(terms) <= MAX_BLEND_VOICES else None


@given(st.text(alphabet="af_b-ky9 .()+\t\u00a0\u0301", max_size=40))
def test_the_one_pass_parser_reads_the_grammar_the_pattern_did(spec: str) -> None:
    try:
        parsed: list[tuple[str, float]] | None = parse_spec(spec)
    except ValueError:
        parsed = None
    assert parsed == _reference(spec)


@pytest.mark.parametrize(
    "spec",
    ["a(" + "1" * 20000, "a(" + "1" * 255, "a" * 257, "af_sky(" + "9" * 300 + ")",
     "+".join(["af_sky"] * 9), "+" * 20000, "(" * 20000, " " * 20000 + "af_sky"],
)  # fmt: skip
def test_voices_past_the_bounds_are_refused_at_once(book: VoiceBook, spec: str) -> None:
    started = time.perf_counter()
    with pytest.raises(ValueError):
        parse_spec(spec)
    with pytest.raises(UnknownVoice) as caught:
        book.resolve(spec)
    assert len(caught.value.message) < 400  # the voice is not echoed whole
    assert time.perf_counter() - started < 0.5  # a ceiling far above the microseconds it takes


def test_a_voice_of_256_characters_is_still_parsed() -> None:
    spec = "af_sky(" + "1" * (MAX_VOICE_CHARS - 8) + ")"
    assert len(spec) == MAX_VOICE_CHARS
    assert parse_spec(spec)[0][0] == "af_sky"


def test_aliases_that_are_blends_cannot_grow_a_blend_past_the_cap() -> None:
    voices = [f"af_v{i}" for i in range(16)]
    aliases = {"one": "+".join(voices[:8]), "two": "+".join(voices[8:])}
    book = VoiceBook(voices, voice_map=aliases, default_voice="af_v0")
    assert len(book.weights("one")) == MAX_BLEND_VOICES
    with pytest.raises(UnknownVoice):
        book.resolve("one+two")
