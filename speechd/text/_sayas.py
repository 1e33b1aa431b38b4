"""SSML `<say-as>`: how its text is read, as the text the normaliser and the G2P then read.

    characters, spell-out   letter by letter (`ABC` -> `A B C`), each letter at its own place
    digits                  digit by digit
    cardinal, ordinal       a number in words (num2words, in the voice's language where it
                            has one; else the digits as written)
    date                    `format` (`mdy`, `dmy`, `ymd`, `md`, `dm`, `ym`, `my`, `y`, `m`,
                            `d`; default `ymd`) says which field is which: `January 15th 2024`
                            in English, the digits as written in other languages
    time                    `3:30pm`, `15:30`, `9:05:10`: `3 30 PM`, `15 30`, `9 oh 5 and 10
                            seconds` in English
    telephone               digit groups: `+1 (555) 123-4567` -> `plus 1, 5 5 5, 1 2 3, ...`

A value it cannot read (a `date` that is no date) is read as written. Words it writes map to
the element's whole text; letters and digits read one by one keep their own places.
"""

from __future__ import annotations

import calendar
import re
from typing import Final

from ._english import _clock, _ordinal
from ._mapped import Mapped, Part

__all__ = ["INTERPRETATIONS", "say_as"]

INTERPRETATIONS: Final = frozenset(
    {"characters", "spell-out", "digits", "cardinal", "number", "ordinal", "date", "time",
     "telephone"}
)  # fmt: skip
_NUM2WORDS: Final = {"a": "en", "b": "en", "e": "es", "f": "fr", "i": "it", "p": "pt_BR", "j": "ja"}
_NUMBER = re.compile(r"[-+]?\d{1,15}(?:\.\d{1,6})?")
_ORDINAL = re.compile(r"(\d{1,15})(?:st|nd|rd|th|\.|º|ª|er|e|ème|o|a)?", re.IGNORECASE)
_FIELDS = re.compile(r"\d{1,4}")
_TIME = re.compile(
    r"(\d{1,2})(?::|h|\.)(\d{2})(?::(\d{2}))?\s?(?:([AaPp])\.?\s?[Mm]\.?)?|(\d{1,2})\s?([AaPp])\.?\s?[Mm]\.?"
)
_MONTHS: Final = list(calendar.month_name)[1:]
_DATE_FORMATS: Final = frozenset({"mdy", "dmy", "ymd", "md", "dm", "ym", "my", "y", "m", "d"})


def say_as(kind: str, fmt: str, content: Mapped, lang: str) -> Mapped | None:
    """`content` read as `kind`; None when `kind` is not one this reads."""
    english = lang in ("a", "b")
    text = content.text.strip()
    if kind in ("characters", "spell-out"):
        return _one_by_one(content, str.isalnum, upper=english)
    if kind == "digits":
        return _one_by_one(content, str.isdigit)
    if kind in ("cardinal", "number"):
        bare = text.replace(",", "").replace(" ", "")
        return _words(content, bare, lang) if _NUMBER.fullmatch(bare) else content
    if kind == "ordinal":
        m = _ORDINAL.fullmatch(text.replace(",", ""))
        return _words(content, m.group(1), lang, ordinal=True) if m else content
    if kind == "date":
        spoken = _date(text, fmt or "ymd") if english else None
        return content.at(spoken, 0, len(content)) if spoken else content
    if kind == "time":
        spoken = _time(text) if english else None
        return content.at(spoken, 0, len(content)) if spoken else content
    if kind == "telephone":
        return _telephone(content)
    return None


def _one_by_one(content: Mapped, keep: type[str] | object, *, upper: bool = False) -> Mapped:
    """The characters `keep` accepts, each a word of its own at its own place."""
    parts: list[Mapped | str] = []
    for i, c in enumerate(content.text):
        if keep(c):  # type: ignore[operator]
            if parts:
                parts.append(" ")
            parts.append(content.at(c.upper() if upper else c, i, i + 1))
    return Mapped.concat(parts) if parts else content


def _words(content: Mapped, number: str, lang: str, *, ordinal: bool = False) -> Mapped:
    code = _NUM2WORDS.get(lang)
    if code is None:
        return content
    from num2words import num2words  # misaki's own dependency; imported on first use

    try:
        value: float = int(number) if number.lstrip("+-").isdigit() else float(number)
        spoken = num2words(value, lang=code, to="ordinal" if ordinal else "cardinal")
    except (ValueError, NotImplementedError, OverflowError):
        return content
    return content.at(spoken.replace("-", " ") if code == "en" else spoken, 0, len(content))


def _date(text: str, fmt: str) -> str | None:
    """English words for a date written in the order `fmt` says; None if it is not one."""
    fmt = fmt.lower()
    fields = _FIELDS.findall(text)
    if fmt not in _DATE_FORMATS or len(fields) != len(fmt):
        return None
    value = {key: int(field) for key, field in zip(fmt, fields, strict=True)}
    month, day, year = value.get("m"), value.get("d"), value.get("y")
    if month is not None and not 1 <= month <= 12:
        return None
    if day is not None:
        days = calendar.monthrange(year or 2000, month or 1)[1] if month else 31
        if not 1 <= day <= days:
            return None
    words = []
    if month is not None:
        words.append(_MONTHS[month - 1])
    if day is not None:
        words.append(_ordinal(day) if month is not None else f"the {_ordinal(day)}")
    if year is not None:
        words.append(str(year))
    return " ".join(words)


def _time(text: str) -> str | None:
    m = _TIME.fullmatch(text)
    if m is None:
        return None
    if m.group(5):  # `3pm`
        return _clock(int(m.group(5)), 0, 0, f"{m.group(6).upper()}M")
    ampm = f"{m.group(4).upper()}M" if m.group(4) else ""
    return _clock(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0), ampm)


def _telephone(content: Mapped) -> Mapped:
    """Digit groups, read digit by digit, a pause (comma) between groups; `+` as `plus`."""
    text = content.text
    parts: list[Part] = []
    for m in re.finditer(r"\d+|\+", text):
        if parts:
            parts.append(" " if m.group() == "+" or text[m.start() - 1] == "+" else ", ")
        if m.group() == "+":
            parts.append(content.at("plus", *m.span()))
            continue
        for i in range(m.start(), m.end()):
            if i > m.start():
                parts.append(" ")
            parts.append(content[i : i + 1])
    return Mapped.concat([p for p in parts if not isinstance(p, tuple)]) if parts else content
