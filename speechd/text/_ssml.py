"""SSML, read safely into the planner's text, over the XML tokenizer in `_xml`.

The subset (anything else is spoken as its text and named in `unsupported`):

    speak           the root
    p               a paragraph: a block, as a blank line is in plain text
    s               a sentence: closed with a full stop where it has no closing punctuation
    voice           `name`: the text is read with that voice (a name, an alias or a blend, as
                    a request's `voice`; an unknown one is an error naming it), in the
                    voice's language unless an `xml:lang` says otherwise; no `name` is an
                    error (voices are chosen by name: `gender`, `age`, `variant` are named
                    in `unsupported`)
    lang            `xml:lang`: the text's language
    break           `time` (`500ms`, `2s`, at most 10 s) or `strength` (none .. x-strong):
                    a pause, a planner unit of its own (silence the worker writes, in chunks
                    of its own: never audio the model made)
    sub             `alias` is read in place of the element's text
    say-as          `interpret-as` characters, spell-out, digits, cardinal, ordinal, date
                    (`format`), time, telephone (`_sayas`)
    phoneme         `alphabet="ipa"` and `ph`: the text read as those phonemes (Kokoro's set,
                    `_phonemes`); a phone Kokoro cannot say is an error naming it
    prosody         `rate`: x-slow .. x-fast, `N%`, `+N%`/`-N%`, or a multiplier; the speed
                    it makes must stay within the speed bounds
    emphasis        `level`: English words get misaki's stress markup (strong: primary stress
                    on every word, moderate: stress raised a step, reduced: lowered, none:
                    as written); other languages read it as plain text
    mark            `name`: a named point, reported among the timed words

`xml:lang` (on `speak`, `voice`, `p`, `s`, `lang`) says which language's G2P reads the text
(`_languages.tag_language`); the voice in force says how it sounds. Inside a `voice`, the
text is in the voice's language unless its own or an inner `xml:lang` says otherwise; a
language no Kokoro voice speaks is an error.

The reader never expands anything: `_xml` refuses a DTD, every entity but XML's five escapes
and character references, and processing instructions but the XML declaration, and bounds
names and attributes. This module bounds the rest as the document is read, before anything
is built on it: nesting depth (`MAX_DEPTH`), elements (`MAX_ELEMENTS`), the text of `say-as`
and `phoneme` (`MAX_CONTENT`), a break's length, the pauses in all (`MAX_PAUSE_S`: the
hard cap, refused where it is passed; the check also holds a document to `allowed_pause_s`
of the letters and digits it speaks, which it knows only once read whole), the distinct
names `<voice>` gives (`MAX_VOICES`, counted before a new one is resolved; a name's length
is the resolver's to bound, as a request's voice is). Reading is linear in the document:
each token is read once and the position only moves forward.

What the planner gets (`SsmlReader.read`, a bounded piece of the document at a time): plain
text (whitespace collapsed, `p`/`s` as blank lines, `sub` and `say-as` rewritten, `phoneme`
and `emphasis` as misaki markup) mapped character by character to the SSML it came from, and
one `SENTINEL` character per event (a pause, a mark, a change of how the text is read: its
rate, voice or language) with the event beside it. The planner cuts its slices at sentinels,
so no normaliser rule ever sees one. A change of reading is written just before the first
text read the new way (not where its tag is), so a sentence's closing `.` and a paragraph's
end stay with the text before it, and changes with no text between them make one event.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final, NamedTuple

from speechd.errors import InvalidRequest

from ._chunks import MAX_SPEED, MIN_SPEED
from ._languages import tag_language
from ._mapped import Mapped
from ._phonemes import ipa_to_kokoro, unsayable
from ._sayas import INTERPRETATIONS, say_as
from ._xml import SsmlError, XmlReader

__all__ = [
    "FREE_PAUSE_S",
    "MAX_BREAK_MS",
    "MAX_DEPTH",
    "MAX_ELEMENTS",
    "MAX_PAUSE_S",
    "MAX_VOICES",
    "PAUSE_PER_LETTER_S",
    "SENTINEL",
    "Event",
    "SsmlError",
    "SsmlReader",
    "VoiceResolver",
    "allowed_pause_s",
    "looks_like_ssml",
]

#: Stands in the planner's text for one event (a private-use character the reader strips
#: from the document's own text).
SENTINEL: Final = "\ue010"
MAX_DEPTH: Final = 32
#: The most elements a document holds (a 200,000-character chapter with a `<s>` per sentence
#: and a break in each has a few thousand).
MAX_ELEMENTS: Final = 5_000
#: The most distinct names the `<voice>` elements of one document give (each is resolved,
#: and may be a blend whose packs the worker averages).
MAX_VOICES: Final = 16
#: The most text a `say-as` or `phoneme` holds (misaki's markup takes 100 for a word).
MAX_CONTENT: Final = 100
MAX_BREAK_MS: Final = 10_000
#: The pauses one document holds in all, at most (its breaks added up): silence costs the device
#: nothing, but a listener hears it, the store keeps it and a download waits for it; 3,989
#: characters of 10 s breaks once asked for 35 minutes of it. Refused where it is passed.
MAX_PAUSE_S: Final = 3600
#: Below that, a document pauses at most `FREE_PAUSE_S` plus `PAUSE_PER_LETTER_S` for each
#: letter or digit it speaks (`allowed_pause_s`): about fifteen times the speech, so a guided
#: breathing script or a quiz's silences pass, and a page of breaks with a word at its end
#: does not.
FREE_PAUSE_S: Final = 60
PAUSE_PER_LETTER_S: Final = 1
#: What a check keeps of the text it reads (the start, to tell its script).
SAMPLE_CHARS: Final = 4000
_BREAKS: Final = {"none": 0, "x-weak": 100, "weak": 250, "medium": 500, "strong": 750,
                  "x-strong": 1000}  # fmt: skip
_RATES: Final = {"x-slow": 0.5, "slow": 0.75, "medium": 1.0, "default": 1.0, "fast": 1.25,
                 "x-fast": 1.5}  # fmt: skip
_STRESS: Final = {"strong": "+2", "moderate": "+1", "reduced": "-1", "none": ""}
#: The attributes of `voice` that choose a voice otherwise than by name (not supported).
_VOICE_TRAITS: Final = ("gender", "age", "variant", "languages")
#: Elements an `xml:lang` changes the language of (elsewhere it is ignored, as before).
_LANG_ELEMENTS: Final = frozenset({"speak", "voice", "p", "s", "lang"})

#: A voice name (or alias, or blend) as the document writes it -> its spec and language code;
#: raises InvalidRequest (UnknownVoice) for a name that is no voice here.
VoiceResolver = Callable[[str], tuple[str, str]]

_SPACE = re.compile(r"\s+")
#: Whitespace that collapsing changes (a single space stays as it is).
_ODD_SPACE = re.compile(r"\s{2,}|[^\S ]")
_PRIVATE = re.compile("[\ue000-\uf8ff]")
_WORD = re.compile(r"[^\s\[\]()]{1,100}")
_TIME = re.compile(r"(\d{1,6}(?:\.\d{1,3})?)\s*(ms|s)")
_PERCENT = re.compile(r"([+-]?)(\d{1,4}(?:\.\d{1,2})?)%")
_MULTIPLIER = re.compile(r"\d{1,2}(?:\.\d{1,3})?")
#: Elements whose content is text only, read whole at their end.
_TEXT_ONLY: Final = frozenset({"sub", "say-as", "phoneme"})
_EMPTY: Final = frozenset({"break", "mark"})
#: What ends a sentence already (closing quotes and brackets count with it).
_TERMINAL: Final = frozenset(".!?\u2026:;\"')]\u201d\u2019\u00bb")


class Event(NamedTuple):
    """What a `SENTINEL` stands for: a pause, a mark, or how the text is read from here on
    (each of `rate`, `voice`, `lang` None where it does not change; `voice` "" is the
    document's own voice, `lang` "" its own language: those the reader was opened with)."""

    pause_ms: int = 0
    mark: str = ""
    rate: float | None = None
    source: tuple[int, int] = (-1, -1)
    voice: str | None = None
    lang: str | None = None


class Reading(NamedTuple):
    """How a stretch of the document is read: its rate, its voice (a spec; "" the
    document's own) and the language code of its G2P ("" the document's own)."""

    rate: float = 1.0
    voice: str = ""
    lang: str = ""


class _Open(NamedTuple):
    name: str
    start: int  # where its tag starts
    content: int  # where its content starts
    rate: float
    stress: str
    attrs: dict[str, str]
    voice: str  # the voice in force (a spec; the document's own voice: the reader's `voice`)
    voice_lang: str  # that voice's language code
    lang: str  # the text's language code


def allowed_pause_s(letters: int) -> int:
    """The most pause (seconds, all its breaks added up) a document that speaks `letters`
    letters and digits may ask for: `FREE_PAUSE_S`, plus `PAUSE_PER_LETTER_S` a letter, and
    never more than `MAX_PAUSE_S`."""
    return min(MAX_PAUSE_S, FREE_PAUSE_S + PAUSE_PER_LETTER_S * max(letters, 0))


def looks_like_ssml(text: str) -> bool:
    """A request's input is SSML when it starts (after whitespace) with `<speak`, an XML
    declaration or a DTD (which is then refused)."""
    head = text[:64].lstrip()
    return head.startswith(("<speak", "<?xml")) or head[:9].upper() == "<!DOCTYPE"


class SsmlReader(XmlReader):
    """One SSML document, read a bounded piece at a time (`read`) into the planner's text.

    `lang`: the voice's language letter; `speed`: the request's, which `prosody rate` scales
    (the product must stay within `speed_bounds`); `voice`: the request's voice spec, and
    `voices` what resolves the names `<voice>` gives (None: `<voice>` is not read, but
    spoken as its text and named in `unsupported`). Raises `SsmlError` where the document
    breaks a rule, at the point it is read."""

    def __init__(
        self,
        text: str,
        lang: str,
        *,
        speed: float = 1.0,
        speed_bounds: tuple[float, float] = (MIN_SPEED, MAX_SPEED),
        keep: bool = True,
        voice: str = "",
        voices: VoiceResolver | None = None,
    ) -> None:
        super().__init__(text)
        # False: check only (the api): the text made is not kept, but the first
        # `SAMPLE_CHARS` of each language's (`samples`), and whether any of it is speakable.
        self._keep = keep
        self.samples: dict[str, str] = {}
        self._lang = lang
        self._voice = voice
        self._voices = voices
        self._resolved: dict[str, tuple[str, str]] = {}  # name -> (spec, language code)
        #: What text was read with, in order of first use: the voices (specs; the
        #: request's own included when some text is read with it) and the language codes
        #: of their G2Ps.
        self.voices_used: dict[str, None] = {}
        self.languages: dict[str, None] = {}
        self._reading = Reading()  # how the planner text made so far ends being read
        self._speed = speed
        self._bounds = speed_bounds
        self._stack: list[_Open] = []
        self._state = 0  # 0 before the root, 1 inside it, 2 after it
        self._out: list[Mapped] = []
        self._events: list[Event] = []
        self._collect: list[Mapped] | None = None  # the text of a text-only element
        self._tail = "\n"  # the last character of the text made so far ("\n": none yet)
        self._elements = 0
        self.unsupported: dict[str, None] = {}
        self.made = 0  # characters of planner text made so far
        self.paused_ms = 0  # the breaks read so far, added up
        self.letters = 0  # letters and digits of the text made so far (what it speaks)

    @property
    def speakable(self) -> bool:
        """Whether the text made so far holds anything to say (a letter or a digit)."""
        return self.letters > 0

    @property
    def done(self) -> bool:
        return self._pos >= len(self._text) and self._state == 2

    @property
    def left(self) -> int:
        """Characters of the document not read yet."""
        return len(self._text) - self._pos

    # ------------------------------------------------------------------ reading

    def read(self, budget: int = 4096) -> tuple[Mapped, list[Event]]:
        """The planner text (and its events, one per `SENTINEL` in it, in order) of the next
        `budget` characters of the document or so (whole tokens)."""
        text = self._text
        stop = self._pos + budget
        while self._pos < len(text) and self._pos < stop:
            self._step()
        if self._pos >= len(text):
            if self._state == 0:
                raise SsmlError("The input has no <speak> element.")
            if self._state == 1:
                raise SsmlError(f"<{self._stack[-1].name}> is not closed.")
        out, events = Mapped.concat(self._out), self._events
        self._out, self._events = [], []
        self.made += len(out)
        return out, events

    def read_all(self) -> tuple[Mapped, list[Event]]:
        """The whole document at once (what the api checks)."""
        parts: list[Mapped] = []
        events: list[Event] = []
        while not self.done:
            out, found = self.read(1 << 20)
            parts.append(out)
            events += found
        return Mapped.concat(parts), events

    # ------------------------------------------------------------------ elements

    def _element(self, name: str, start: int, attrs: dict[str, str], *, empty: bool) -> None:
        if self._state == 2 or (self._state == 0 and name != "speak"):
            raise self._fail("The document must be one <speak> element", start)
        if self._collect is not None:
            raise self._fail(f"<{self._stack[-1].name}> holds text only, not <{name}>", start)
        if len(self._stack) >= MAX_DEPTH:
            raise self._fail(f"Elements are nested more than {MAX_DEPTH} deep", start)
        self._elements += 1
        if self._elements > MAX_ELEMENTS:
            raise self._fail(f"The document has more than {MAX_ELEMENTS} elements", start)
        self._state = 1
        top = self._stack[-1] if self._stack else None
        rate = top.rate if top else 1.0
        stress = top.stress if top else ""
        voice = top.voice if top else self._voice
        voice_lang = top.voice_lang if top else self._lang
        lang = top.lang if top else self._lang
        if name == "voice" and self._voices is not None:
            voice, voice_lang = self._voice_named(attrs, start)
            lang = voice_lang
        tag = attrs.get("xml:lang")
        if tag is not None and name in _LANG_ELEMENTS:
            lang = self._tag_lang(tag, voice_lang, start)
        if lang not in ("a", "b"):
            stress = ""  # misaki's stress markup is English's
        span = (start, self._pos)
        if name in ("speak", "p"):
            self._block(start)
        elif name == "s":
            self._sentence(start, closing=False)
        elif name == "break":
            self._pause(attrs, span)
        elif name == "mark":
            mark = attrs.get("name", "")
            if not mark:
                raise self._fail("<mark> needs a name", start)
            self._event(Event(mark=mark, source=span))
        elif name == "prosody":
            rate = self._rate(attrs, rate, start)
            for other in sorted(set(attrs) - {"rate"}):
                self._unsupported(f"prosody {other}")
        elif name == "emphasis":
            level = attrs.get("level", "moderate")
            if level not in _STRESS:
                raise self._fail(f"<emphasis level=\"{level}\"> is not a level", start)
            stress = _STRESS[level] if lang in ("a", "b") else ""
        elif name in _TEXT_ONLY:
            self._check_text_only(name, attrs, start)
        elif name == "voice" and self._voices is not None:
            for trait in _VOICE_TRAITS:
                if trait in attrs:
                    self._unsupported(f"voice {trait}")
        elif name != "lang" or tag is None:
            self._unsupported(name)
        opened = _Open(name, start, self._pos, rate, stress, attrs, voice, voice_lang, lang)
        if empty:
            self._end(opened, self._pos, self._pos)
            return
        self._stack.append(opened)
        if name in _TEXT_ONLY:
            self._collect = []

    def _end_tag(self, name: str, lt: int, gt: int) -> None:
        if not self._stack or self._stack[-1].name != name:
            raise self._fail(f"</{name}> closes no open <{name}>", lt)
        self._end(self._stack.pop(), lt, gt)

    def _end(self, opened: _Open, lt: int, gt: int) -> None:
        name = opened.name
        if name in _TEXT_ONLY:
            content = Mapped.concat(self._collect or []).strip()
            self._collect = None
            if name != "sub" and len(content) > MAX_CONTENT:
                raise self._fail(
                    f"<{name}> holds more than {MAX_CONTENT} characters", opened.start
                )
            self._text_only(opened, content, lt)
        elif name in _EMPTY:
            if lt > opened.content and self._text[opened.content : lt].strip():
                raise self._fail(f"<{name}> must be empty", opened.start)
        elif name in ("speak", "p"):
            self._block(lt)
        elif name == "s":
            self._sentence(lt, closing=True)
        if name == "speak" and not self._stack:
            self._state = 2

    def _text_only(self, opened: _Open, content: Mapped, lt: int) -> None:
        name, attrs = opened.name, opened.attrs
        # What it says maps to its text (or, empty, to the whole element).
        where = content if content.text else Mapped.new(" ", opened.start, lt)
        if name == "sub":
            self._emit(where.at(attrs["alias"], 0, len(where)))
        elif name == "say-as":
            kind = attrs["interpret-as"]
            spoken = say_as(kind, attrs.get("format", ""), content, opened.lang)
            if spoken is None:
                self._unsupported(f"say-as {kind}")
                spoken = content
            self._emit(spoken)
        else:  # phoneme
            word = re.sub(r"[\[\]()/\s]+", " ", content.text).strip() or "_"
            phonemes = ipa_to_kokoro(attrs["ph"], opened.lang)
            bad = unsayable(phonemes.replace(" ", ""))
            if bad is not None or not phonemes.strip() or len(phonemes) > 200 or "/" in phonemes:
                what = f"'{bad}' (U+{ord(bad):04X})" if bad else "these phonemes"
                raise self._fail(
                    f"<phoneme ph=\"{attrs['ph'][:40]}\">: Kokoro cannot say {what}", opened.start
                )
            self._emit(where.at(f"[{word}](/{phonemes}/)", 0, len(where)))

    def _check_text_only(self, name: str, attrs: dict[str, str], start: int) -> None:
        need = {"sub": ("alias",), "say-as": ("interpret-as",), "phoneme": ("ph",)}[name]
        for key in need:
            if not attrs.get(key):
                raise self._fail(f"<{name}> needs {key}", start)
        if name == "phoneme" and attrs.get("alphabet", "ipa").lower() != "ipa":
            raise self._fail("<phoneme> takes alphabet=\"ipa\" only", start)
        if name == "say-as" and attrs["interpret-as"] not in INTERPRETATIONS:
            self._unsupported(f"say-as {attrs['interpret-as']}")

    def _tag_lang(self, tag: str, voice_lang: str, at: int) -> str:
        """The language code an `xml:lang` asks for, read by a voice of `voice_lang`."""
        lang = tag_language(tag, voice_lang)
        if lang is None:
            raise self._fail(f'xml:lang="{tag[:40]}": no Kokoro voice speaks that language', at)
        return lang

    def _voice_named(self, attrs: dict[str, str], at: int) -> tuple[str, str]:
        """The voice spec and language code a `<voice>` names (resolved once per name)."""
        name = attrs.get("name", "").strip()
        if not name:
            raise self._fail(
                "<voice> needs a name (voices are chosen by name; gender, age and variant "
                "are not supported)",
                at,
            )
        found = self._resolved.get(name)
        if found is None:
            if len(self._resolved) >= MAX_VOICES:
                raise self._fail(f"The document names more than {MAX_VOICES} voices", at)
            assert self._voices is not None
            try:
                found = self._voices(name)
            except InvalidRequest as exc:
                raise self._fail(f'<voice name="{name[:80]}">: {exc.message}', at) from exc
            self._resolved[name] = found
        return found

    def _pause(self, attrs: dict[str, str], span: tuple[int, int]) -> None:
        if "time" in attrs:
            m = _TIME.fullmatch(attrs["time"])
            if m is None:
                raise self._fail(f"<break time=\"{attrs['time'][:20]}\">: write 500ms or 2s")
            ms = round(float(m.group(1)) * (1 if m.group(2) == "ms" else 1000))
        else:
            strength = attrs.get("strength", "medium")
            if strength not in _BREAKS:
                raise self._fail(f"<break strength=\"{strength[:20]}\"> is not a strength")
            ms = _BREAKS[strength]
        if ms > MAX_BREAK_MS:
            raise self._fail(f"A break is at most {MAX_BREAK_MS // 1000} s")
        self.paused_ms += ms
        if self.paused_ms > MAX_PAUSE_S * 1000:
            raise self._fail(
                f"The breaks add up to more than {MAX_PAUSE_S:,} s: a document pauses at most"
                f" {MAX_PAUSE_S // 60} minutes in all"
            )
        if ms > 0:
            self._event(Event(pause_ms=ms, source=span))

    def _rate(self, attrs: dict[str, str], rate: float, at: int) -> float:
        value = attrs.get("rate")
        if value is None:
            return rate
        if value in _RATES:
            new = _RATES[value]
        elif m := _PERCENT.fullmatch(value):
            share = float(m.group(2)) / 100
            new = rate * (1 + share if m.group(1) == "+" else 1 - share) if m.group(1) else share
        elif _MULTIPLIER.fullmatch(value):
            new = float(value)
        else:
            raise self._fail(f"<prosody rate=\"{value[:20]}\"> is not a rate", at)
        low, high = self._bounds
        speed = self._speed * new
        if not low <= speed <= high:
            raise self._fail(
                f"<prosody rate=\"{value}\"> makes the speed {speed:.2f}, outside {low} to {high}",
                at,
            )
        return new

    def _unsupported(self, name: str) -> None:
        self.unsupported.setdefault(name)

    # ------------------------------------------------------------------ text

    def _text_run(self, a: int, b: int, *, raw: bool = False) -> None:
        run = self._text[a:b]
        if run.isspace() and self._collect is None and not raw:  # between tags: one space
            if self._state == 1 and not self._tail.isspace():
                self._emit(Mapped.of(" ", a))
            return
        chunk = Mapped.of(run, a)
        if not raw and "&" in chunk.text:
            chunk = self._refs(chunk)
        if not chunk.text.isascii():
            chunk = chunk.sub(_PRIVATE, "")
        chunk = chunk.sub(_ODD_SPACE, " ")
        if self._state != 1:
            if chunk.text.strip():
                raise self._fail("Text outside the <speak> element", a)
            return
        if self._collect is not None:
            self._collect.append(chunk)
            return
        if not chunk.text:
            return
        if self._stack and self._stack[-1].name in _EMPTY:
            raise self._fail(f"<{self._stack[-1].name}> must be empty", a)
        stress = self._stack[-1].stress if self._stack else ""
        if stress:
            chunk = chunk.sub(_WORD, lambda m: f"[{m.group()}]({stress})")
        self._emit(chunk)

    def _emit(self, text: Mapped) -> None:
        if self._tail.isspace():
            text = text.lstrip()
        if not text.text:
            return
        top = self._stack[-1] if self._stack else None
        if top is not None and not text.text.isspace():  # a space goes with what it follows
            text = self._read_as(top, text)
        self._tail = text.text[-1]
        self.letters += sum(map(str.isalnum, text.text))
        if self._keep:
            self._out.append(text)
            return
        lang = top.lang if top is not None else self._lang
        sample = self.samples.get(lang, "")
        if len(sample) < SAMPLE_CHARS:
            self.samples[lang] = sample + text.text[: SAMPLE_CHARS - len(sample)]

    def _read_as(self, top: _Open, text: Mapped) -> Mapped:
        """Before `text` (read as `top` says): an event where that is not how the text
        before it is read (after the space it starts with, which goes with what it
        follows), and the voice and language it is read with counted as used. The text
        left to emit."""
        reading = Reading(
            top.rate,
            "" if top.voice == self._voice else top.voice,
            "" if top.lang == self._lang else top.lang,
        )
        was = self._reading
        if reading != was:
            self._reading = reading
            lead = len(text.text) - len(text.text.lstrip())
            if lead:
                if self._keep:
                    self._out.append(text[:lead])
                text = text[lead:]
            at = text.point(0)
            self._event(
                Event(
                    rate=reading.rate if reading.rate != was.rate else None,
                    voice=reading.voice if reading.voice != was.voice else None,
                    lang=reading.lang if reading.lang != was.lang else None,
                    source=(at, at),
                )
            )
        if (top.voice not in self.voices_used or top.lang not in self.languages) and any(
            c.isalnum() for c in text.text
        ):
            self.voices_used.setdefault(top.voice)
            self.languages.setdefault(top.lang)
        return text

    def _sentence(self, at: int, *, closing: bool) -> None:
        """A sentence's edge (`s`): its text apart from the text around it, and, at its end,
        a full stop where it has no closing punctuation (sentences of a paragraph stay one
        block, so its G2P reads them together, as it would plain prose)."""
        if self._tail in ("\n", " ", SENTINEL):
            return
        ending = "" if not closing or self._tail in _TERMINAL else "."
        if self._keep:
            self._out.append(Mapped.new(ending + " ", at, at))
        self._tail = " "

    def _block(self, at: int) -> None:
        """A block boundary (`p`, `speak`): a blank line, once."""
        if self._tail != "\n":
            if self._keep:
                self._out.append(Mapped.new("\n\n", at, at))
            self._tail = "\n"

    def _event(self, event: Event) -> None:
        if self._keep:
            self._out.append(Mapped.new(SENTINEL, *event.source))
            self._events.append(event)
        self._tail = SENTINEL
