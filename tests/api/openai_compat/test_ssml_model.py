"""The text front end on the real model, through HTTP (`speechd serve`): a break is silence
of its length in the audio, tags are never read aloud (an offline recogniser says so), `sub`
and `say-as` change what is heard, `prosody` changes how long it takes, a lexicon entry
changes what is heard, a `<voice>` is read with its voice, and every word points back at
the text as sent."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import numpy.typing as npt
import pytest

from harness.servers import LiveServer, start_server
from harness.speech import transcribe_pcm16
from tests.api.test_serve import serve_args

pytestmark = [pytest.mark.model, pytest.mark.slow]

RATE = 24_000
LEXICON = "Zorblax = zebra\n"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    root = tmp_path_factory.mktemp("ssml")
    lexicon = root / "lexicon.txt"
    lexicon.write_text(LEXICON, encoding="utf-8")
    args = [*serve_args(root / "data"), "--lexicon", str(lexicon)]
    with start_server(args, timeout=240) as server:
        yield server


def speech(server: LiveServer, text: str, voice: str = "am_adam") -> npt.NDArray[np.float32]:
    body = {"input": text, "voice": voice, "response_format": "pcm", "stream": False}
    response = httpx.post(server.v1 + "/audio/speech", json=body, timeout=300)
    assert response.status_code == 200, response.text
    return np.frombuffer(response.content, "<i2").astype(np.float32) / 32768


def heard_words(pcm: npt.NDArray[np.float32], rate: int) -> list[str]:
    """The words pocketsphinx hears, lower case."""
    raw = (np.clip(pcm, -1, 1) * 32767).astype("<i2").tobytes()
    return re.findall(r"[a-z']+", transcribe_pcm16(raw, rate).lower())


def longest_silence_s(pcm: npt.NDArray[np.float32]) -> float:
    """The longest run of 10 ms frames 40 dB under the speech's loudest."""
    frames = pcm[: len(pcm) // 240 * 240].reshape(-1, 240)
    level = np.sqrt(np.mean(frames**2, axis=1))
    quiet = level < level.max() * 0.01
    best = max((len(list(g)) for q, g in itertools.groupby(quiet) if q), default=0)
    return best * 0.01


def test_a_break_is_silence_of_its_length(served: LiveServer) -> None:
    plain = speech(served, "One two three. Four five six.")
    paused = speech(served, '<speak>One two three. <break time="2s"/> Four five six.</speak>')
    assert longest_silence_s(plain) < 0.8
    assert longest_silence_s(paused) == pytest.approx(2.0, abs=0.25)
    assert len(paused) / RATE - len(plain) / RATE == pytest.approx(2.0, abs=0.6)


def test_tags_are_not_read_and_sub_and_say_as_change_what_is_heard(served: LiveServer) -> None:
    ssml = (
        '<speak version="1.1" xml:lang="en-US"><p><s>The <emphasis>garden</emphasis> opens '
        'in <say-as interpret-as="cardinal">2024</say-as>.</s> <mark name="m"/>'
        '<s><prosody rate="90%">Visit the <sub alias="World Wide Web">WWW</sub> page '
        'today.</prosody></s></p></speak>'
    )
    heard = heard_words(speech(served, ssml), RATE)
    markup = {"speak", "version", "emphasis", "say", "interpret", "cardinal", "mark", "name",
              "prosody", "rate", "sub", "alias", "lang", "xml"}  # fmt: skip
    assert not markup & set(heard), heard
    assert "thousand" in heard, heard  # two thousand and twenty-four, not twenty twenty-four
    assert len({"world", "wide", "web"} & set(heard)) >= 2, heard
    assert len({"garden", "opens", "visit", "page", "today"} & set(heard)) >= 3, heard
    plain = heard_words(speech(served, "The garden opens in 2024. Visit the WWW page today."), RATE)
    assert "thousand" not in plain and "wide" not in plain, plain


def test_prosody_rate_changes_the_duration(served: LiveServer) -> None:
    sentence = "The old man walked slowly along the quiet beach."
    normal = len(speech(served, f"<speak>{sentence}</speak>"))
    slow = len(speech(served, f'<speak><prosody rate="x-slow">{sentence}</prosody></speak>'))
    fast = len(speech(served, f'<speak><prosody rate="x-fast">{sentence}</prosody></speak>'))
    assert slow / normal > 1.5 and fast / normal < 0.85, (normal, slow, fast)


def test_the_lexicon_changes_what_is_heard(served: LiveServer) -> None:
    heard = heard_words(speech(served, "The Zorblax ran across the open field."), RATE)
    assert "zebra" in heard, heard


def made_words(server: LiveServer, text: str) -> list[dict[str, object]]:
    made = httpx.post(server.v1 + "/casts", json={"input": text, "voice": "af_heart"}, timeout=30)
    assert made.status_code in (200, 201), made.text
    cast = made.json()["id"]
    audio = httpx.get(f"{server.v1}/casts/{cast}/audio", timeout=300)  # to its end
    assert audio.status_code == 200
    page = httpx.get(f"{server.v1}/casts/{cast}/words", timeout=30).json()
    assert page["complete"]
    return page["words"]


def check_sources(text: str, words: list[dict[str, object]]) -> dict[str, list[str]]:
    """Every word's source is in the text and never goes back; spoken word -> its sources."""
    last = 0
    found: dict[str, list[str]] = {}
    for word in words:
        begin, end = word["source"]  # type: ignore[misc]
        assert last <= begin <= end <= len(text), (word, text)
        last = begin
        key = str(word["word"]).strip(".,") or f"<{word.get('mark')}>"
        found.setdefault(key, []).append(text[begin:end])
    return found


def test_words_point_back_at_the_text_as_sent(served: LiveServer, tmp_path: Path) -> None:
    text = "  On 2024-01-15 Prof. Lee paid $5 for 3 km of rope."
    found = check_sources(text, made_words(served, text))
    assert found["January"] == ["2024-01-15"] and found["15th"] == ["2024-01-15"]
    assert found["Professor"] == ["Prof."] and found["$5"] == ["$5"]
    assert found["kilometers"] == ["km"] and found["3"] == ["3"] and found["On"] == ["On"]
    ssml = (
        '<speak>I use <sub alias="World Wide Web">WWW</sub> <mark name="here"/>since '
        '<say-as interpret-as="date" format="mdy">01/02/2024</say-as>.</speak>'
    )
    found = check_sources(ssml, made_words(served, ssml))
    assert found["World"] == found["Wide"] == found["Web"] == ["WWW"]
    assert found["<here>"] == ['<mark name="here"/>'] and found["since"] == ["since"]
    assert found["January"] == ["01/02/2024"]


def median_pitch_hz(pcm: npt.NDArray[np.float32]) -> float:
    """The median fundamental frequency of `pcm`'s voiced 40 ms frames (autocorrelation,
    60-400 Hz)."""
    size, low, high = 960, RATE // 400, RATE // 60
    found = []
    for start in range(0, len(pcm) - size, size // 2):
        frame = pcm[start : start + size] - pcm[start : start + size].mean()
        if np.sqrt(np.mean(frame**2)) < 0.02:
            continue  # silence or a quiet consonant
        corr = np.correlate(frame, frame, "full")[size - 1 :]
        lag = low + int(np.argmax(corr[low:high]))
        if corr[lag] > 0.5 * corr[0]:
            found.append(RATE / lag)
    assert len(found) > 10, len(found)
    return float(np.median(found))


def halves(pcm: npt.NDArray[np.float32]) -> tuple[npt.NDArray[np.float32], ...]:
    """The audio before and after its longest silence (the break between the two)."""
    frames = pcm[: len(pcm) // 240 * 240].reshape(-1, 240)
    quiet = np.sqrt(np.mean(frames**2, axis=1)) < np.abs(pcm).max() * 0.01
    runs, at = [], 0  # (length, first frame) of each quiet run
    for q, group in itertools.groupby(quiet):
        length = len(list(group))
        if q:
            runs.append((length, at))
        at += length
    length, first = max(runs)
    return pcm[: first * 240], pcm[(first + length) * 240 :]


def test_a_voice_element_is_read_with_its_voice(served: LiveServer) -> None:
    line = "Hello there, my friend, how are you today?"
    one = speech(served, f'<speak>{line} <break time="1s"/> {line}</speak>', voice="af_heart")
    two = speech(
        served,
        f'<speak>{line} <break time="1s"/> <voice name="am_adam">{line}</voice></speak>',
        voice="af_heart",
    )
    same = [median_pitch_hz(half) for half in halves(one)]
    heart, adam = (median_pitch_hz(half) for half in halves(two))
    assert same[0] == pytest.approx(same[1], rel=0.1), same  # one voice: one pitch
    assert heart == pytest.approx(same[0], rel=0.1), (heart, same)
    assert adam < 0.8 * heart, (heart, adam)  # a man's voice, lower
    heard = heard_words(two, RATE)
    assert heard.count("friend") + heard.count("today") >= 2, heard
    ssml = f'<speak>{line} <voice name="am_adam">{line}</voice></speak>'
    found = check_sources(ssml, made_words(served, ssml))
    assert found["friend"] == ["friend", "friend"] and found["today?"] == ["today", "today"]
