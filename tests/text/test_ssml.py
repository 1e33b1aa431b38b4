# ruff: noqa: RUF001  (IPA and Kokoro phonemes are the point)
"""The SSML reader: the subset, and everything it refuses (before any work, and fast)."""

from __future__ import annotations

import time

import pytest

from speechd.errors import InvalidRequest
from speechd.text import check_input, looks_like_ssml
from speechd.text._ssml import MAX_DEPTH, MAX_ELEMENTS, SENTINEL, SsmlError, SsmlReader


def read(ssml: str, lang: str = "a", **options: object) -> tuple[str, list, SsmlReader]:
    reader = SsmlReader(ssml, lang, **options)  # type: ignore[arg-type]
    text, events = reader.read_all()
    return text.text, events, reader


def spoken(ssml: str, lang: str = "a") -> str:
    """The planner text of a document, events and whitespace tidied for comparing."""
    return " ".join(read(ssml, lang)[0].replace(SENTINEL, " | ").split())


def test_a_document_is_recognised_by_its_start() -> None:
    assert looks_like_ssml("  <speak>Hi</speak>")
    assert looks_like_ssml('<?xml version="1.0"?><speak>Hi</speak>')
    assert not looks_like_ssml("Hi <speak>")


@pytest.mark.parametrize(
    ("ssml", "text"),
    [
        ("<speak>Hello   \n  world</speak>", "Hello world"),
        ("<speak><p><s>One</s><s>Two</s></p><p>Three</p></speak>", "One. Two. Three"),
        ('<speak>Use <sub alias="World Wide Web">WWW</sub>.</speak>', "Use World Wide Web."),
        ('<speak><say-as interpret-as="characters">abc</say-as></speak>', "A B C"),
        ('<speak><say-as interpret-as="spell-out">ok</say-as></speak>', "O K"),
        ('<speak><say-as interpret-as="digits">2024</say-as></speak>', "2 0 2 4"),
        ('<speak><say-as interpret-as="cardinal">2024</say-as></speak>',
         "two thousand and twenty four"),
        ('<speak><say-as interpret-as="ordinal">21</say-as></speak>', "twenty first"),
        ('<speak><say-as interpret-as="date" format="mdy">01/02/2024</say-as></speak>',
         "January 2nd 2024"),
        ('<speak><say-as interpret-as="date" format="dmy">01/02/2024</say-as></speak>',
         "February 1st 2024"),
        ('<speak><say-as interpret-as="time">3:05pm</say-as></speak>', "3 oh 5 PM"),
        ('<speak><say-as interpret-as="telephone">+1 (555) 123-4567</say-as></speak>',
         "plus 1, 5 5 5, 1 2 3, 4 5 6 7"),
        ('<speak><phoneme alphabet="ipa" ph="ˈkoʊkəɹoʊ">Kokoro</phoneme></speak>',
         "[Kokoro](/ˈkOkəɹO/)"),
        ('<speak><emphasis level="strong">very good</emphasis></speak>', "[very](+2) [good](+2)"),
        ("<speak>AT&amp;T &lt;3 &#x263A;</speak>", "AT&T <3 \u263a"),
        ("<speak><![CDATA[a <b> & c]]></speak>", "a <b> & c"),
        ("<speak>a<!-- not read -->b</speak>", "ab"),
    ],
)  # fmt: skip
def test_the_subset_reads_as_the_text_it_stands_for(ssml: str, text: str) -> None:
    assert spoken(ssml) == text


def test_pauses_marks_and_rates_are_events_in_the_text() -> None:
    ssml = (
        '<speak>A <break time="1.5s"/> B <break strength="weak"/> C <break strength="none"/>'
        '<mark name="here"/>D <prosody rate="slow">E</prosody> F</speak>'
    )
    text, events, _ = read(ssml)
    assert text.count(SENTINEL) == len(events) == 5
    pauses = [e.pause_ms for e in events if e.pause_ms]
    assert pauses == [1500, 250]  # strength none: no pause at all
    assert [e.mark for e in events if e.mark] == ["here"]
    assert [e.rate for e in events if e.rate is not None] == [0.75, 1.0]
    mark = next(e for e in events if e.mark)
    assert ssml[mark.source[0] : mark.source[1]] == '<mark name="here"/>'


@pytest.mark.parametrize(
    ("rate", "factor"),
    [("x-slow", 0.5), ("fast", 1.25), ("150%", 1.5), ("+20%", 1.2), ("-50%", 0.5), ("2", 2.0)],
)
def test_prosody_rates(rate: str, factor: float) -> None:
    _, events, _ = read(f'<speak><prosody rate="{rate}">x</prosody></speak>')
    assert events[0].rate == pytest.approx(factor)


def test_elements_outside_the_subset_are_spoken_and_named_once() -> None:
    text, _, reader = read(
        '<speak><audio src="a.mp3">the fallback</audio> <voice name="x">v</voice>'
        '<audio src="b.mp3"/> <prosody pitch="high" rate="fast">p</prosody>'
        ' <say-as interpret-as="unit">5</say-as></speak>'
    )
    assert " ".join(text.replace(SENTINEL, " ").split()) == "the fallback v p 5"
    assert list(reader.unsupported) == ["audio", "voice", "prosody pitch", "say-as unit"]


@pytest.mark.parametrize(
    ("ssml", "says"),
    [
        ("<speak>Hi", "not closed"),
        ("<speak><s>Hi</speak>", "closes no open"),
        ("Hi <speak/>", "outside the <speak>"),
        ("<speak>a</speak><speak>b</speak>", "one <speak>"),
        ('<!DOCTYPE speak [<!ENTITY x "y">]><speak>&x;</speak>', "DTD"),
        ("<speak>&x;</speak>", "entity"),
        ("<speak>&#0;</speak>", "not an XML character"),
        ("<speak><?php x ?></speak>", "processing instruction"),
        ("<speak><!-- open</speak>", "comment is not closed"),
        ('<speak a="1" a="2"/>', "repeats"),
        ("<speak><b x=1>y</b></speak>", "well-formed"),
        ('<speak><break time="1h"/></speak>', "500ms or 2s"),
        ('<speak><break time="11s"/></speak>', "at most 10 s"),
        ("<speak><break>x</break></speak>", "must be empty"),
        ('<speak><sub alias="a"><s>x</s></sub></speak>', "text only"),
        ("<speak><sub>x</sub></speak>", "needs alias"),
        ('<speak><phoneme alphabet="x-sampa" ph="a">x</phoneme></speak>', "ipa"),
        ('<speak><phoneme ph="ǂ">x</phoneme></speak>', r"U\+01C2"),
        ('<speak><prosody rate="500%">x</prosody></speak>', "outside"),
        ('<speak><prosody rate="quick">x</prosody></speak>', "not a rate"),
        ('<speak xml:lang="fr-FR">Bonjour</speak>', "French"),
        ('<speak><s xml:lang="de">Hallo</s></speak>', "no Kokoro voice"),
        ('<speak><say-as interpret-as="digits">' + "1" * 101 + "</say-as></speak>", "100"),
    ],
)
def test_bad_documents_are_refused_saying_why(ssml: str, says: str) -> None:
    with pytest.raises(SsmlError, match=says):
        read(ssml, speed_bounds=(0.25, 4.0))


def test_a_prosody_rate_is_judged_with_the_requests_speed() -> None:
    read('<speak><prosody rate="x-fast">x</prosody></speak>', speed=2.0)  # 3.0: fine
    with pytest.raises(SsmlError, match=r"makes the speed 4\.50"):
        read('<speak><prosody rate="x-fast">x</prosody></speak>', speed=3.0)


def test_a_voice_language_reads_its_own_xml_lang() -> None:
    assert spoken('<speak xml:lang="en-GB">Hi</speak>', "b") == "Hi"
    assert spoken('<speak xml:lang="fr-FR">Salut</speak>', "f") == "Salut"
    # Emphasis is misaki's stress markup: English only.
    assert spoken("<speak><emphasis>tr\u00e8s</emphasis></speak>", "f") == "tr\u00e8s"


def hostile(pattern: str, n: int) -> str:
    return (pattern * (n // len(pattern) + 1))[:n]


@pytest.mark.parametrize(
    ("ssml", "says"),
    [
        ("<speak>" + "<s>" * 10_000, f"more than {MAX_DEPTH} deep"),
        ("<speak>" + "<s></s>" * 30_000 + "</speak>", f"more than {MAX_ELEMENTS} elements"),
        ('<speak><s a="' + "x" * 200_000 + '">x</s></speak>', "longer than"),
        ("<speak><" + "s" * 200_000 + ">", "longer than"),
        ("<speak><s " + "".join(f'a{i}="1" ' for i in range(20_000)) + ">", "more than 16"),
        ("<speak>" + hostile("<!--", 200_000), "comment is not closed"),
        ("<speak>" + hostile("&amp", 200_000), "entity"),
        ("<speak>" + hostile("<s", 200_000), "well-formed"),
    ],
)
def test_hostile_documents_are_refused_at_once(ssml: str, says: str) -> None:
    started = time.perf_counter()
    with pytest.raises(InvalidRequest, match=says) as caught:
        check_input(ssml, lang="a", ssml=True)
    assert time.perf_counter() - started < 2  # linear: a few ms
    assert caught.value.param == "input"


def test_a_long_document_is_checked_in_linear_time() -> None:
    body = '<s>Hello there, <break time="200ms"/> friend.</s> ' * 1_000
    started = time.perf_counter()
    check_input(f"<speak>{body}{hostile('word ', 150_000)}</speak>", lang="a", ssml=True)
    assert time.perf_counter() - started < 5  # ~20 ms


def test_check_input_answers_for_what_cannot_be_spoken() -> None:
    assert check_input('<speak><audio src="x"/>Hi</speak>', lang="a", ssml=True).unsupported == (
        "audio",
    )
    with pytest.raises(InvalidRequest, match="no text to speak"):
        check_input('<speak><break time="1s"/></speak>', lang="a", ssml=True)
    with pytest.raises(InvalidRequest, match=r"Kana script.*Japanese"):
        check_input("こんにちは、お元気ですか。今日はいい天気ですね。", lang="a", ssml=False)
    with pytest.raises(InvalidRequest, match="Cyrillic script, which no Kokoro voice reads"):
        check_input("Привет, как дела? Всё хорошо.", lang="a", ssml=False)
    with pytest.raises(InvalidRequest, match=r"Latin script.*English"):
        check_input("Hello there, how are you today?", lang="z", ssml=False)
    with pytest.raises(InvalidRequest, match="cannot say"):
        check_input("Say [x](/ǂa/) now.", lang="a", ssml=False)
    # A few foreign words in a text of the voice's script, or no letters at all, are fine.
    check_input("The word こんにちは means hello in Japanese, as you know.", lang="a", ssml=False)
    check_input("12345 !!!", lang="j", ssml=False)
