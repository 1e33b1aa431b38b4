"""What the api checks of a request's text before it makes a cast (no model, no G2P):

* SSML is read whole (`SsmlReader` in check mode: linear, nothing kept but a sample of its
  text in each language): malformed or refused markup, bounds, a `prosody` rate outside the
  speed bounds, a phone Kokoro cannot say, an `xml:lang` no Kokoro voice speaks, no text at
  all, or more pause than the document may hold (`MAX_PAUSE_S` in all, and
  `allowed_pause_s` of what it speaks), is an `InvalidRequest` on `input`, and so is a
  `<voice>` naming no voice here (an `UnknownVoice`, on `input`); elements outside the
  subset are listed (`unsupported`), and so are the voices and languages the text is read
  with besides the request voice's own (`voices`, `languages`: whoever checks them against
  what the workers speak);
* plain text's pronunciation markup (`[word](/phonemes/)`) must hold phones Kokoro can say;
* the text's script must be one its language's G2P reads: Japanese text sent to an English
  voice would come out as silence or garbage, so it gets an answer that says so. Only the
  first `SAMPLE_CHARS` characters (of each language's text, in SSML) are looked at, and only
  a text whose letters are nearly all in scripts the language does not read is refused (a
  few foreign words are fine).
"""

from __future__ import annotations

import re
from typing import Final, NamedTuple

from speechd.errors import InvalidRequest, UnknownVoice

from ._chunks import MAX_SPEED, MIN_SPEED
from ._languages import LANGUAGES
from ._phonemes import unsayable
from ._ssml import (
    FREE_PAUSE_S,
    MAX_PAUSE_S,
    PAUSE_PER_LETTER_S,
    SAMPLE_CHARS,
    SsmlError,
    SsmlReader,
    VoiceResolver,
    allowed_pause_s,
)

__all__ = ["InputCheck", "check_input"]

_SCRIPTS: Final = (
    ("Latin", re.compile(r"[A-Za-z\u00c0-\u024f]")),
    ("Han", re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")),
    ("Kana", re.compile(r"[\u3040-\u30ff]")),
    ("Devanagari", re.compile(r"[\u0900-\u097f]")),
    ("Cyrillic", re.compile(r"[\u0400-\u04ff]")),
    ("Greek", re.compile(r"[\u0370-\u03ff]")),
    ("Arabic", re.compile(r"[\u0600-\u06ff]")),
    ("Hebrew", re.compile(r"[\u0590-\u05ff]")),
    ("Hangul", re.compile(r"[\u1100-\u11ff\uac00-\ud7af]")),
    ("Thai", re.compile(r"[\u0e00-\u0e7f]")),
)
#: The scripts each language's G2P reads.
_READS: Final = {
    **{lang: frozenset({"Latin"}) for lang in "abefip"},
    "h": frozenset({"Devanagari", "Latin"}),
    "j": frozenset({"Kana", "Han"}),
    "z": frozenset({"Han"}),
}
#: Below this many letters a text says too little about its script to refuse it.
_LEAST_LETTERS: Final = 8
#: A text is refused when less than this share of its letters is in a script the voice reads.
_LEAST_SHARE: Final = 0.1
_MARKUP = re.compile(r"\[[^\[\]\n]{1,100}\]\(/([^/\n()]{1,200})/\)")


class InputCheck(NamedTuple):
    """What a request's text asks that the api reports: SSML elements (and attribute or
    `say-as` kinds) outside the subset, each once, in order of appearance; and, for SSML,
    the voices its text is read with other than the request's (specs: `<voice>`) and the
    language codes of the G2Ps that read it other than the request voice's, in order of
    first use."""

    unsupported: tuple[str, ...] = ()
    voices: tuple[str, ...] = ()
    languages: tuple[str, ...] = ()


def check_input(
    text: str,
    *,
    lang: str,
    ssml: bool,
    speed: float = 1.0,
    voice: str = "",
    voices: VoiceResolver | None = None,
) -> InputCheck:
    """Check a request's text for a voice of language `lang` (see the module docstring);
    InvalidRequest (param `input`) when it cannot be spoken as asked. For SSML, `voice` is
    the request's voice spec and `voices` resolves the names `<voice>` elements give (None:
    `<voice>` is read as its text, as an element outside the subset)."""
    if not ssml:
        sample = text[:SAMPLE_CHARS]
        if "](/" in text:
            for m in _MARKUP.finditer(text):
                bad = unsayable(m.group(1).replace(" ", ""))
                if bad is not None:
                    raise InvalidRequest(
                        f"The pronunciation {m.group(0)[:60]!r} holds {bad!r} (U+{ord(bad):04X}),"
                        " which Kokoro cannot say.",
                        param="input",
                    )
        _check_script(sample, lang)
        return InputCheck()
    bounds = (MIN_SPEED, MAX_SPEED)
    reader = SsmlReader(
        text, lang, speed=speed, speed_bounds=bounds, keep=False, voice=voice, voices=voices
    )
    try:
        reader.read_all()
    except SsmlError as exc:
        message = f"The SSML cannot be read: {exc}"
        cause = exc.__cause__
        if isinstance(cause, UnknownVoice):  # a `<voice>` naming no voice: said as such
            unknown = UnknownVoice(cause.voice, cause.available)
            unknown.message, unknown.param = message, "input"
            raise unknown from exc
        raise InvalidRequest(message, param="input") from exc
    if not reader.speakable:
        raise InvalidRequest("The SSML holds no text to speak.", param="input")
    _check_pauses(reader.paused_ms, reader.letters)
    for language, sample in reader.samples.items():
        _check_script(sample, language)
    return InputCheck(
        tuple(reader.unsupported),
        tuple(v for v in reader.voices_used if v != voice),
        tuple(code for code in reader.languages if code != lang),
    )


def _check_pauses(paused_ms: int, letters: int) -> None:
    """Refuse a document whose breaks add up to more than its letters allow
    (`allowed_pause_s`); nothing is clamped: the caller is told the limit."""
    allowed = allowed_pause_s(letters)
    if paused_ms <= allowed * 1000:
        return
    raise InvalidRequest(
        f"The SSML's breaks add up to {paused_ms / 1000:,.1f} s, more than its text allows:"
        f" a document pauses at most {FREE_PAUSE_S} s plus {PAUSE_PER_LETTER_S} s for each"
        f" letter or digit it speaks ({letters:,} here: {allowed:,} s), and never more than"
        f" {MAX_PAUSE_S:,} s.",
        param="input",
    )


def _check_script(sample: str, lang: str) -> None:
    counts = {name: len(pattern.findall(sample)) for name, pattern in _SCRIPTS}
    letters = sum(counts.values())
    reads = _READS.get(lang, frozenset({"Latin"}))
    if letters < _LEAST_LETTERS or sum(counts[s] for s in reads) >= _LEAST_SHARE * letters:
        return
    script = max(counts, key=lambda name: counts[name])
    speakers = [LANGUAGES[code] for code, scripts in _READS.items() if script in scripts]
    speakers = list(dict.fromkeys(speakers))
    language = LANGUAGES.get(lang, lang)
    if not speakers:
        raise InvalidRequest(
            f"The input is written in the {script} script, which no Kokoro voice reads "
            f"(this voice speaks {language}).",
            param="input",
        )
    raise InvalidRequest(
        f"The input is written in the {script} script, which a voice for {language} does not "
        f"read: choose a voice for {' or '.join(speakers[:3])}.",
        param="input",
    )
