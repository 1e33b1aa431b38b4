# ruff: noqa: RUF001  (IPA and Kokoro phonemes are the point)
"""Words that map back to the input as sent: every timed word's `source`, through
normalisation, SSML and G2P, on the real English G2P; pauses, marks and rates in the plan."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from speechd.engine import SAMPLE_RATE, Engine, silence
from speechd.engine._trim import LEAD_S
from speechd.text import Chunk, ChunkPolicy, PlanStatus

POLICY = ChunkPolicy(rtf=0)


def plan(engine: Engine, text: str, **reading: bool) -> list[Chunk]:
    return list(engine.planner("af_heart", POLICY, text=text, done=True, **reading).chunks())


def sources(engine: Engine, text: str, **reading: bool) -> list[tuple[str, str]]:
    """(word spoken, the input it points at) for every word of the plan, marks included."""
    out = []
    for chunk in plan(engine, text, **reading):
        for span in chunk.words:
            begin, end = span.source
            out.append((span.text or f"<{span.mark}>", text[begin:end]))
    return out


def check_spans(engine: Engine, text: str, **reading: bool) -> None:
    """Every word has a source inside the input, in order and never going back."""
    last = 0
    for chunk in plan(engine, text, **reading):
        for span in chunk.words:
            begin, end = span.source
            assert 0 <= begin <= end <= len(text), (span, text)
            assert begin >= last, (span, text)
            last = begin


def test_normalised_words_point_at_what_the_user_wrote(tiny_engine: Engine) -> None:
    text = (
        "On 2024-01-15 I paid $5.50 to Prof. Lee at 3:30 PM, approx. 5km away. "
        "Call 555-123-4567 or read [the guide](https://x.io/a) at https://www.example.com/docs."
    )
    found = sources(tiny_engine, text)
    assert found[:4] == [
        ("On", "On"),
        ("January", "2024-01-15"),  # every word spoken for the date points at the date
        ("15th", "2024-01-15"),
        ("2024", "2024-01-15"),
    ]
    expect = {
        "$5.50": "$5.50",
        "Professor": "Prof.",
        "3": "3:30 PM",
        "approximately": "approx.",
        "kilometers": "km",  # the unit's own word; its number keeps its place
        "guide": "guide",  # a link's text, not its markup
        "slash": "https://www.example.com/docs",
    }
    for spoken, source in expect.items():
        assert (spoken, source) in [(w.rstrip(".,"), s) for w, s in found], spoken
    digits = [s for w, s in found if w.rstrip(",") in "0123456789" and len(w.rstrip(",")) == 1]
    assert digits[-10:] == list("5551234567")  # a phone number read digit by digit
    check_spans(tiny_engine, text)


def test_leading_whitespace_and_markdown_keep_offsets(tiny_engine: Engine) -> None:
    text = "  # Title\n\n* **Bold** item with `code`\n"
    assert sources(tiny_engine, text) == [
        ("Title.", "Title"),
        ("Bold", "Bold"),
        ("item", "item"),
        ("with", "with"),
        ("code", "code"),
    ]


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.sampled_from([*list("ab AB1 2-.,:/@[]()*_`#\n$%&"), "km", "Jan.", " pm", "2024"]),
        max_size=40,
    ).map("".join)
)
def test_spans_are_monotone_and_within_any_input(tiny_engine: Engine, text: str) -> None:
    check_spans(tiny_engine, text)


SSML = (
    '<speak><p>Hello <break time="1500ms"/> world.</p>'
    '<s>I use <sub alias="World Wide Web">WWW</sub> on <say-as interpret-as="date" '
    'format="mdy">01/02/2024</say-as>, <mark name="there"/>call '
    '<say-as interpret-as="digits">42</say-as>.</s>'
    '<s><prosody rate="x-slow">Slowly</prosody> said <phoneme alphabet="ipa" '
    'ph="ˈkoʊkəɹoʊ">Kokoro</phoneme>.</s></speak>'
)


def test_ssml_words_point_at_the_elements(tiny_engine: Engine) -> None:
    found = sources(tiny_engine, SSML, ssml=True)
    assert found == [
        ("Hello", "Hello"),
        ("world.", "world"),
        ("I", "I"),
        ("use", "use"),
        ("World", "WWW"),  # a sub's words point at the element's text
        ("Wide", "WWW"),
        ("Web", "WWW"),
        ("on", "on"),
        ("January", "01/02/2024"),
        ("2nd", "01/02/2024"),
        ("2024,", "01/02/2024"),
        ("<there>", '<mark name="there"/>'),
        ("call", "call"),
        ("4", "4"),
        ("2.", "2"),
        ("Slowly", "Slowly"),
        ("said", "said"),
        ("Kokoro.", "Kokoro"),
    ]
    check_spans(tiny_engine, SSML, ssml=True)


def test_ssml_pauses_and_rates_shape_the_chunks(tiny_engine: Engine) -> None:
    chunks = plan(tiny_engine, SSML, ssml=True)
    assert chunks[0].text == "Hello" and chunks[0].pause_ms == 1500  # a pause ends a chunk
    pause = chunks[1]  # ... and is a chunk of its own, speech right after it
    assert pause.silent and (pause.text, pause.lead_ms, pause.pause_ms) == ("", 1500, 0)
    assert pause.index == chunks[2].index == 1  # it moves neither the index nor the budgets
    slow = [c for c in chunks if c.rate != 1.0]
    assert [c.text for c in slow] == ["Slowly"] and slow[0].rate == 0.5
    assert all(c.pause_ms == 0 for c in chunks[1:])
    assert [c.silent for c in chunks].count(True) == 1
    mark = next(s for c in chunks for s in c.words if s.mark)
    assert mark.start == mark.end  # a point: where "call" starts


def test_a_pause_is_silence_of_its_own_before_and_after_speech(tiny_engine: Engine) -> None:
    text = '<speak><break time="2s"/>Hi <break time="1s"/></speak>'
    chunks = plan(tiny_engine, text, ssml=True)
    assert [(c.text, c.silent, c.lead_ms, c.pause_ms) for c in chunks] == [
        ("", True, 2000, 0),  # speech follows at once: it keeps a little silence of its own
        ("Hi", False, 0, 1000),
        ("", True, 0, 1000),  # nothing follows
    ]
    lead, _, tail = (tiny_engine.synthesize(c, "af_heart", 1.0, seed=1) for c in chunks)
    assert len(lead.pcm) == round((2.0 - LEAD_S) * SAMPLE_RATE) and not lead.pcm.any()
    assert len(tail.pcm) == SAMPLE_RATE and not tail.pcm.any()


def test_long_pauses_are_cut_into_chunks_of_whole_breaks(tiny_engine: Engine) -> None:
    breaks = '<break time="10s"/>' * 3 + '<break time="4s"/><break time="5s"/><mark name="m"/>'
    text = f'<speak>One. {breaks}<break time="1s"/>Two.</speak>'
    chunks = plan(tiny_engine, text, ssml=True)
    assert [(c.text, c.pause_ms, c.lead_ms) for c in chunks] == [
        ("One.", 10_000, 0),
        ("", 10_000, 0),
        ("", 10_000, 0),
        ("", 10_000, 0),
        ("", 9_000, 0),  # 4 s and 5 s together, within SILENCE_CHUNK_MS
        ("", 0, 1_000),  # the mark rides in front of the pause after it, at its start
        ("Two.", 0, 0),
    ]
    assert [s.mark for s in chunks[5].words] == ["m"]
    made = silence(chunks[5])
    assert [(w.mark, w.start, w.end) for w in made.words] == [("m", 0, 0)]


def test_an_ssml_plan_resumes_from_every_position(tiny_engine: Engine) -> None:
    text = SSML.replace("</speak>", "<s>" + "More words follow here. " * 30 + "</s></speak>")
    policy = ChunkPolicy(rtf=0, first_tokens=10, max_tokens=60)
    whole = []
    planner = tiny_engine.planner("af_heart", policy, text=text, done=True, ssml=True)
    while (step := planner.step()).status is not PlanStatus.DONE:
        if step.chunk is not None:
            whole.append((step.chunk, planner.position))
    assert len(whole) > 6
    for i in (0, 1, 3, len(whole) // 2, len(whole) - 2):
        resumed = tiny_engine.planner(
            "af_heart", policy, text=text, done=True, ssml=True, position=whole[i][1]
        )
        assert list(resumed.chunks()) == [c for c, _ in whole[i + 1 :]]


def test_without_normalisation_the_text_is_read_as_sent(tiny_engine: Engine) -> None:
    text = "Due 2024-01-15, **bold**."
    chunks = plan(tiny_engine, text, normalize=False)
    assert " ".join(c.text for c in chunks) == "Due 2024-01-15, **bold**."
    assert sources(tiny_engine, text, normalize=False)[1] == ("2024-01-15,", "2024-01-15")


def test_silence_is_made_without_the_model_and_counts_from_the_speech_after_it() -> None:
    before_voice = Chunk(0, "", "", lead_ms=1000)
    alone = Chunk(0, "", "", pause_ms=1000)
    assert len(silence(before_voice).pcm) == round((1.0 - LEAD_S) * SAMPLE_RATE)
    assert len(silence(alone).pcm) == SAMPLE_RATE
    assert silence(alone).pcm.dtype == np.float32 and not silence(alone).pcm.any()
    assert silence(alone).words == ()
    assert len(silence(Chunk(0, "", "", lead_ms=30)).pcm) == 0  # within the speech's own lead


@pytest.mark.parametrize("lang_voice", ["ff_siwis"])
def test_phrase_languages_read_pronunciation_markup(tiny_engine: Engine, lang_voice: str) -> None:
    if lang_voice not in tiny_engine.voices.installed:
        pytest.skip("no French voice in the tiny model")
    chunks = list(
        tiny_engine.planner(lang_voice, POLICY, text="Dis [Kokoro](/kOkoʁo/) vite.", done=True)
        .chunks()
    )
    assert "kOkoʁo" in " ".join(c.phonemes for c in chunks)
