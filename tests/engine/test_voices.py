"""Voice names, OpenAI aliases, blends and languages (torch-free)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from speechd.engine import DEFAULT_VOICE_MAP, VoiceBook, installed_voices
from speechd.errors import InvalidRequest, UnknownVoice

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
