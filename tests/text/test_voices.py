"""SSML `<voice>` and `xml:lang`: the reader's events, the plan's chunks (one voice each, cut
at every change of voice, each word still pointing at the text as sent), the G2P of each
language, resuming across a change, and documents that switch voices as often as the bounds
allow."""

from __future__ import annotations

import time

import pytest

from speechd.engine import Engine
from speechd.errors import InvalidRequest, UnknownVoice
from speechd.text import ChunkPolicy, PlanStatus, check_input
from speechd.text._languages import tag_language
from speechd.text._ssml import MAX_DEPTH, MAX_ELEMENTS, SENTINEL, SsmlError, SsmlReader

POLICY = ChunkPolicy(rtf=0)
BOOK = {
    "af_heart": ("af_heart", "a"),
    "am_adam": ("am_adam", "a"),
    "ash": ("am_adam", "a"),  # an alias, as OpenAI's names are
    "bf_emma": ("bf_emma", "b"),
    "ff_siwis": ("ff_siwis", "f"),
    "jf_alpha": ("jf_alpha", "j"),
    "af_heart+am_adam": ("af_heart(0.5)+am_adam(0.5)", "a"),
}


def resolve(name: str) -> tuple[str, str]:
    if name not in BOOK:
        raise UnknownVoice(name, sorted(BOOK))
    return BOOK[name]


def read(ssml: str, lang: str = "a", voice: str = "af_heart") -> tuple[str, list, SsmlReader]:
    reader = SsmlReader(ssml, lang, voice=voice, voices=resolve)
    text, events = reader.read_all()
    return text.text, events, reader


def check(ssml: str, lang: str = "a", voice: str = "af_heart") -> object:
    return check_input(ssml, lang=lang, ssml=True, voice=voice, voices=resolve)


DIALOGUE = (
    "<speak><p>The night was cold, and the wind was up. "
    '<voice name="am_adam">"Who goes there?" he called.</voice> Nobody answered him.</p>'
    '<p><voice name="ff_siwis">Bonjour, mon ami.</voice> <s xml:lang="fr-FR">Merci '
    "beaucoup.</s> And that was all.</p></speak>"
)


# -- the reader -------------------------------------------------------------------------------


def test_a_voice_is_an_event_before_its_first_words() -> None:
    text, events, reader = read(DIALOGUE)
    shown = text.replace(SENTINEL, "|")
    assert shown == (
        'The night was cold, and the wind was up. |"Who goes there?" he called. |Nobody '
        "answered him.\n\n|Bonjour, mon ami. |Merci beaucoup. |And that was all.\n\n"
    )
    # "" is the document's own voice and language: the request's.
    assert [(e.voice, e.lang) for e in events] == [
        ("am_adam", None),
        ("", None),
        ("ff_siwis", "f"),  # a voice speaks its own language ...
        ("", None),  # ... and the s's xml:lang keeps French for the request's voice
        (None, ""),
    ]
    assert list(reader.voices_used) == ["af_heart", "am_adam", "ff_siwis"]
    assert list(reader.languages) == ["a", "f"]


def test_a_sentence_ending_inside_a_voice_keeps_its_full_stop_there() -> None:
    text, _, _ = read('<speak><s><voice name="ash">Yes</voice></s><s>No</s></speak>')
    assert text.replace(SENTINEL, "|") == "|Yes. |No. \n\n"


def test_nested_voices_give_the_outer_one_back() -> None:
    text, events, _ = read(
        '<speak>A <voice name="am_adam">B <voice name="bf_emma">C</voice> D</voice> E</speak>'
    )
    assert text.replace(SENTINEL, "|") == "A |B |C |D |E\n\n"
    assert [(e.voice, e.lang) for e in events] == [
        ("am_adam", None),
        ("bf_emma", "b"),
        ("am_adam", ""),
        ("", None),
    ]


def test_changes_with_no_words_between_them_are_one_event_or_none() -> None:
    _, events, _ = read(
        '<speak>A <voice name="am_adam"> </voice><voice name="am_adam"><voice name="bf_emma">'
        "</voice>B</voice></speak>"
    )
    assert [(e.voice, e.lang) for e in events] == [("am_adam", None)]
    # The request's own voice named again changes nothing.
    _, events, _ = read('<speak>A <voice name="af_heart">B</voice> C</speak>')
    assert events == []


def test_a_voice_name_resolves_as_a_requests_voice_does() -> None:
    _, events, _ = read('<speak><voice name="ash">Hi</voice></speak>')
    assert events[0].voice == "am_adam"
    _, events, _ = read('<speak><voice name="af_heart+am_adam">Hi</voice></speak>')
    assert events[0].voice == "af_heart(0.5)+am_adam(0.5)"


@pytest.mark.parametrize(
    ("ssml", "says"),
    [
        ('<speak><voice name="zz_nobody">Hi</voice></speak>', "Unknown voice 'zz_nobody'"),
        ("<speak><voice>Hi</voice></speak>", "needs a name"),
        ('<speak><voice gender="female">Hi</voice></speak>', "gender, age and variant"),
        ('<speak><voice name="am_adam" xml:lang="de">Hi</voice></speak>', "no Kokoro voice"),
        ('<speak><p xml:lang="tlh">Hi</p></speak>', "no Kokoro voice"),
    ],
)
def test_what_cannot_be_voiced_is_refused_saying_why(ssml: str, says: str) -> None:
    with pytest.raises(SsmlError, match=says):
        read(ssml)


def test_voice_traits_beside_a_name_are_named_as_unsupported() -> None:
    _, events, reader = read(
        '<speak><voice name="am_adam" gender="male" age="30">Hi</voice></speak>'
    )
    assert events[0].voice == "am_adam"
    assert list(reader.unsupported) == ["voice gender", "voice age"]


def test_without_a_resolver_a_voice_is_read_as_its_text() -> None:
    reader = SsmlReader('<speak><voice name="am_adam">Hi</voice></speak>', "a")
    text, events = reader.read_all()
    assert text.text.strip() == "Hi" and events == []
    assert list(reader.unsupported) == ["voice"]


@pytest.mark.parametrize(
    ("tag", "voice", "lang"),
    [
        ("en-GB", "a", "b"),
        ("en_gb", "a", "b"),
        ("en-US", "b", "a"),
        ("en", "b", "b"),  # English without a region: the voice's own English
        ("en", "f", "a"),
        ("fr-CA", "a", "f"),
        ("pt-BR", "a", "p"),
        ("cmn-Hans-CN", "a", "z"),
        ("ja", "a", "j"),
        ("de-DE", "a", None),
        ("", "a", None),
    ],
)
def test_language_tags(tag: str, voice: str, lang: str | None) -> None:
    assert tag_language(tag, voice) == lang


def test_xml_lang_decides_the_g2p_and_emphasis_follows_it() -> None:
    # English emphasis is misaki's stress markup; inside French text it is plain text.
    text, _, _ = read(
        '<speak><emphasis><lang xml:lang="fr">tr\u00e8s</lang> good</emphasis></speak>'
    )
    assert text.replace(SENTINEL, "|") == "|tr\u00e8s |[good](+1)\n\n"


# -- the api's check ----------------------------------------------------------------------------


def test_the_check_lists_the_voices_and_languages_a_document_uses() -> None:
    found = check(DIALOGUE)
    assert found.voices == ("am_adam", "ff_siwis")  # the request's own is not listed
    assert found.languages == ("f",)  # nor the request voice's language
    assert check("<speak>Hi there</speak>").voices == ()


def test_an_unknown_voice_is_refused_on_input_naming_it() -> None:
    ssml = '<speak>Hello <voice name="zz_nobody">there</voice>.</speak>'
    with pytest.raises(UnknownVoice) as caught:
        check(ssml)
    assert caught.value.param == "input" and caught.value.code == "voice_not_found"
    assert "zz_nobody" in caught.value.message
    assert f"at character {ssml.index('<voice')}" in caught.value.message


def test_the_script_is_judged_in_each_language() -> None:
    # Latin text for a Japanese voice in its own language: its G2P cannot read it.
    with pytest.raises(InvalidRequest, match=r"Latin script.*Japanese"):
        check('<speak>Hi. <voice name="jf_alpha">Hello there, how are you today?</voice></speak>')
    # ... and read by the English G2P, it is fine (the Japanese voice speaks it).
    check(
        '<speak><voice name="jf_alpha" xml:lang="en-US">Hello there, how are you today?'
        "</voice></speak>"
    )


# -- the plan -----------------------------------------------------------------------------------


def plan(engine: Engine, text: str, policy: ChunkPolicy = POLICY) -> list:
    return list(engine.planner("af_heart", policy, text=text, done=True, ssml=True).chunks())


def test_every_chunk_has_one_voice_and_a_change_of_voice_ends_one(tiny_engine: Engine) -> None:
    chunks = plan(tiny_engine, DIALOGUE)
    voiced = [(c.voice, c.text) for c in chunks]
    adam = [text for voice, text in voiced if voice == "am_adam"]
    french = [text for voice, text in voiced if voice == "ff_siwis"]
    assert adam == ['"Who goes there?" he called.']
    assert french == ["Bonjour, mon ami."]
    assert all(voice == "" for voice, text in voiced if text not in adam + french)
    # Each word points at the text as sent, inside its element.
    for chunk in chunks:
        for span in chunk.words:
            begin, end = span.source
            assert span.text.strip('.,"?') == DIALOGUE[begin:end].strip('"'), span
    inside = DIALOGUE.index("Who goes")
    who = next(s for c in chunks for s in c.words if s.text == '"Who')
    assert who.source == (inside, inside + 3)


def test_each_language_is_read_by_its_own_g2p(tiny_engine: Engine) -> None:
    chunks = plan(tiny_engine, DIALOGUE)
    bonjour = next(c for c in chunks if c.text.startswith("Bonjour"))
    merci = next(c for c in chunks if c.text.startswith("Merci"))
    assert (bonjour.voice, bonjour.lang) == ("ff_siwis", "f")
    assert (merci.voice, merci.lang) == ("", "f")  # French read by the request's voice
    alone = tiny_engine.plan("Bonjour, mon ami.", "ff_siwis")
    assert bonjour.phonemes == alone[0].phonemes
    english = tiny_engine.plan("Merci beaucoup.", "af_heart")[0].phonemes
    assert merci.phonemes.startswith(tiny_engine.plan("Merci beaucoup.", "ff_siwis")[0].phonemes)
    assert not merci.phonemes.startswith(english)


def test_a_voiced_plan_resumes_from_every_position(tiny_engine: Engine) -> None:
    text = DIALOGUE.replace(
        "</speak>",
        "<p>" + "More narration follows here. " * 8
        + '<voice name="am_adam">' + "And he answered at length. " * 8 + "</voice>"
        + "The end.</p></speak>",
    )  # fmt: skip
    policy = ChunkPolicy(rtf=0, first_tokens=10, max_tokens=60)
    whole = []
    planner = tiny_engine.planner("af_heart", policy, text=text, done=True, ssml=True)
    while (step := planner.step()).status is not PlanStatus.DONE:
        if step.chunk is not None:
            whole.append((step.chunk, planner.position))
    assert len({c.voice for c, _ in whole}) == 3 and len(whole) > 8
    for i in range(len(whole) - 1):
        resumed = tiny_engine.planner(
            "af_heart", policy, text=text, done=True, ssml=True, position=whole[i][1]
        )
        assert list(resumed.chunks()) == [c for c, _ in whole[i + 1 :]], i


# -- hostile documents ------------------------------------------------------------------------


def test_voices_nest_no_deeper_than_any_element() -> None:
    deep = "<speak>" + '<voice name="am_adam">' * MAX_DEPTH + "x" + "</voice>" * MAX_DEPTH
    with pytest.raises(InvalidRequest, match=f"more than {MAX_DEPTH} deep"):
        check(deep + "</speak>")
    inner = '<voice name="am_adam"><voice name="bf_emma">' * ((MAX_DEPTH - 1) // 2)
    fits = "<speak>" + inner + "x" + "</voice></voice>" * ((MAX_DEPTH - 1) // 2) + "</speak>"
    assert check(fits).voices == ("bf_emma",)


def test_thousands_of_voice_switches_are_bounded_and_planned_in_short_steps(
    tiny_engine: Engine,
) -> None:
    switches = MAX_ELEMENTS // 2  # each switch is an element, and so is `speak`
    body = "".join(
        f'<voice name="{"am_adam" if i % 2 else "bf_emma"}">Word {i}.</voice>'
        for i in range(switches)
    )
    started = time.perf_counter()
    found = check(f"<speak>{body}</speak>")
    assert time.perf_counter() - started < 5  # linear: tens of ms
    assert found.voices == ("bf_emma", "am_adam") and found.languages == ("b",)
    with pytest.raises(InvalidRequest, match=f"more than {MAX_ELEMENTS} elements"):
        check(f"<speak>{body}{body}</speak>")
    some = body[: body.index(f">Word {switches // 10}.")]
    some = some[: some.rindex("<voice")]
    tiny_engine.plan("Word.", "bf_emma")  # British English's G2P is built once, not timed here
    planner = tiny_engine.planner(
        "af_heart", POLICY, text=f"<speak>{some}</speak>", done=True, ssml=True
    )
    longest, chunks = 0.0, []
    while True:
        began = time.perf_counter()
        step = planner.step()
        longest = max(longest, time.perf_counter() - began)
        if step.status is PlanStatus.DONE:
            break
        if step.chunk is not None:
            chunks.append(step.chunk)
    # A chunk per switch, each in its voice, and no step longer than a few G2P calls.
    assert [c.voice for c in chunks[:4]] == ["bf_emma", "am_adam", "bf_emma", "am_adam"]
    assert len(chunks) == some.count("</voice>") == switches // 10
    assert longest < 2.0, longest
