"""English (`a`, `b`) normalisation: what misaki misreads, made speakable.

URLs and e-mail addresses spelt out (`example dot com`), ISO and slashed dates (`January 15th
2024`), clock times (`3 30 PM`, `9 oh 5`), phone numbers digit by digit, negative numbers
(`minus 5`), numeric ranges (`10 to 20`), units after a number (`5 km` -> `5 kilometers`),
common fractions, and the abbreviations misaki misreads (`Prof.`, `Jr.`, `Jan.`, `approx.`,
`Inc.`, ...). misaki reads cardinals, ordinals, years, decimals, currency, `%`, `&`, `+`, `@`,
`Dr.`, `Mr.`, `vs.`, `e.g.` and `No. 5` well itself, so those are left alone.

Every pattern here is linear on any input: each quantifier is bounded (a number has at most
15 digits, a URL 512 characters, an e-mail address 64 + 255, a domain 8 labels of 63) and
each pattern can start only at the beginning of a run of the characters it reads (a
lookbehind refuses a start inside one), so two attempts never scan the same characters
twice; what is longer than its bound is not one (it is read as written).
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from typing import Final

from ._mapped import Mapped

__all__ = ["ABBREVIATIONS", "english", "english_spell", "neutral_spell"]

# ---------------------------------------------------------------- URLs and addresses

#: A URL starts at the start of a run of URL characters (or after an opening bracket).
URL: Final = re.compile(r"(?<![^\s<>\"'(\[*_~])(?:https?://|www\.)[^\s<>\"']{1,512}", re.IGNORECASE)
EMAIL: Final = re.compile(
    r"(?<![\w.+-])[\w.+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63}){1,8}\b"
)
_SCHEME = re.compile(r"^(?:https?://)?(?:www\.)?", re.IGNORECASE)
_QUERY = re.compile(r"[?#]")
_PATH_PUNCT = re.compile(r"[-_.+=]+")


def neutral_spell(found: str) -> str:
    """Outside English: a URL is read as its host name; an address as written."""
    if "@" in found and "/" not in found:
        return found
    return re.split(r"[/?#]", _SCHEME.sub("", found), maxsplit=1)[0]


def english_spell(found: str) -> str:
    """`https://www.example.com/a-b/c?x=1` -> `example dot com slash a b slash c`."""
    if "@" in found and "/" not in found:
        user, _, host = found.partition("@")
        return f"{_dots(user)} at {_dots(host)}"
    rest = _QUERY.split(_SCHEME.sub("", found), maxsplit=1)[0]
    host, *path = [p for p in rest.split("/") if p] or [""]
    words = [_dots(host), *(_PATH_PUNCT.sub(" ", p).strip() for p in path)]
    return " slash ".join(w for w in words if w)


def _dots(name: str) -> str:
    return " dot ".join(p for p in name.split(".") if p).replace("_", " underscore ")


# ---------------------------------------------------------------- tables

_MONTHS: Final = list(calendar.month_name)[1:]
_MONTH_ABBR: Final = frozenset(m[:3] for m in _MONTHS)
_TITLES: Final = {
    # titles: never end a sentence
    "Prof.": "Professor", "Jr.": "Junior", "Sr.": "Senior", "Gen.": "General",
    "Capt.": "Captain", "Lt.": "Lieutenant", "Sgt.": "Sergeant", "Col.": "Colonel",
    "Rev.": "Reverend", "Hon.": "Honorable", "Gov.": "Governor", "Sen.": "Senator",
    "Pres.": "President", "Mt.": "Mount", "Ft.": "Fort",
}  # fmt: skip
_ENDING: Final = {
    # may end a sentence: the period is kept when a capital or the end follows
    "approx.": "approximately", "Inc.": "Incorporated", "Ltd.": "Limited",
    "Corp.": "Corporation", "Dept.": "Department", "dept.": "department",
    "govt.": "government", "Fig.": "Figure", "fig.": "figure", "Vol.": "Volume",
    "vol.": "volume", "pp.": "pages", "Ch.": "Chapter", "ch.": "chapter",
    "Ave.": "Avenue", "Blvd.": "Boulevard", "Rd.": "Road", "a.k.a.": "also known as",
    "cf.": "compare", "ca.": "circa", "et al.": "and others",
    **{f"{m[:3]}.": m for m in _MONTHS if len(m) > 3},
    "Sept.": "September",
    **{f"{d[:3]}.": d for d in calendar.day_name},
    "Tues.": "Tuesday", "Thurs.": "Thursday",
}  # fmt: skip
#: Every abbreviation this module expands, and the last word of each ("al." of "et al.").
ABBREVIATIONS: Final = frozenset([*_TITLES, *_ENDING, "et", "w/", "w/o"])
_ABBREV_RE = re.compile(
    r"(?<![\w.])("
    + "|".join(re.escape(a) for a in sorted([*_TITLES, *_ENDING], key=len)[::-1])
    + r")"
)
_SHORTHAND: Final = (
    (re.compile(r"(?<!\w)w/o(?=\s)"), "without"),
    (re.compile(r"(?<!\w)w/(?=\s)"), "with"),
)
_UNITS: Final = {
    "km": ("kilometer", "kilometre"), "cm": ("centimeter", "centimetre"),
    "mm": ("millimeter", "millimetre"), "kg": ("kilogram", None), "mg": ("milligram", None),
    "lb": ("pound", None), "lbs": ("pound", None), "oz": ("ounce", None),
    "ft": ("foot", None), "mph": ("mile per hour", None), "kph": ("kilometer per hour",
    "kilometre per hour"), "km/h": ("kilometer per hour", "kilometre per hour"),
    "ml": ("milliliter", "millilitre"), "mL": ("milliliter", "millilitre"),
    "KB": ("kilobyte", None), "kB": ("kilobyte", None), "MB": ("megabyte", None),
    "GB": ("gigabyte", None), "TB": ("terabyte", None), "Hz": ("hertz", None),
    "kHz": ("kilohertz", None), "MHz": ("megahertz", None), "GHz": ("gigahertz", None),
    "kW": ("kilowatt", None), "kWh": ("kilowatt hour", None), "ms": ("millisecond", None),
    "°C": ("degree Celsius", None), "°F": ("degree Fahrenheit", None),
}  # fmt: skip
_PLURALS: Final = {
    "foot": "feet", "hertz": "hertz", "kilohertz": "kilohertz", "megahertz": "megahertz",
    "gigahertz": "gigahertz", "mile per hour": "miles per hour",
    "kilometer per hour": "kilometers per hour", "kilometre per hour": "kilometres per hour",
    "degree Celsius": "degrees Celsius", "degree Fahrenheit": "degrees Fahrenheit",
    "kilowatt hour": "kilowatt hours",
}  # fmt: skip
_FRACTIONS: Final = {
    "1/2": "one half", "1/3": "one third", "2/3": "two thirds", "1/4": "one quarter",
    "3/4": "three quarters", "1/8": "one eighth",
}  # fmt: skip

# ---------------------------------------------------------------- patterns

#: A number: up to 15 digits, or thousands groups; at most 6 decimals.
_NUMBER = r"\d{1,3}(?:,\d{3}){1,5}(?:\.\d{1,6})?|\d{1,15}(?:\.\d{1,6})?"
_UNIT_RE = re.compile(
    rf"(?<![\w.,])({_NUMBER})\s?("
    + "|".join(re.escape(u) for u in sorted(_UNITS, key=len)[::-1])
    + r")(?![\w/])"
)
_FRACTION_RE = re.compile(r"(?<![\w/])(1/2|1/3|2/3|1/4|3/4|1/8)(?![\w/])")
_ISO_DATE = re.compile(r"(?<![\w-])(\d{4})-(\d{1,2})-(\d{1,2})(?![\w-])")
_SLASH_DATE = re.compile(r"(?<![\w/])(\d{1,2})/(\d{1,2})/(\d{4})(?![\w/])")
_TIME = re.compile(
    r"(?<![\w:])(\d{1,2}):(\d{2})(?::(\d{2}))?"
    r"(?:\s?([AaPp])(?:(\.)\s?[Mm]\.|\s?[Mm])(?![A-Za-z]))?(?![\w:])"
)
_AMPM = re.compile(r"(?<![\w.])(\d{1,2})\s?([AaPp])(?:(\.)\s?[Mm]\.|\s?[Mm])(?!\w)")
_PHONE = re.compile(r"(?<![\w+])(?:\+?1[ .-])?\(?(\d{3})\)?[ .-](\d{3})[ .-](\d{4})(?![\w-])")
_NEGATIVE = re.compile("(?:(?<![\\w.,-])-|\u2212)(?=\\d)")
_RANGE = re.compile(
    "(?<![\\w.,-])(\\d{1,15}(?:\\.\\d{1,6})?)\\s?[-\u2013]\\s?(\\d{1,15}(?:\\.\\d{1,6})?)(?![\\w-])"
)
_APPROX = re.compile(r"(?<!\S)~(?=\d)")
_DOMAIN = re.compile(
    r"(?<![\w@.-])((?:[A-Za-z0-9-]{1,63}\.){1,8}"
    r"(?:com|org|net|io|dev|ai|app|edu|gov|co|info|me))(?!\w|\.\w)"
)
_DIGIT = re.compile(r"[0-9\u2212]")
#: The next non-space character after a match (the run of spaces before it is scanned once:
#: a match ends where the next one cannot start).
_NEXT = re.compile(r"\s*(\S?)")


def _following(m: re.Match[str]) -> str:
    found = _NEXT.match(m.string, m.end())
    return found.group(1) if found else ""


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _date(year: int, month: int, day: int) -> str | None:
    if not (1 <= month <= 12 and 1 <= day <= calendar.monthrange(year or 2000, month)[1]):
        return None
    return f"{_MONTHS[month - 1]} {_ordinal(day)} {year}"


def _clock(hour: int, minute: int, second: int, ampm: str) -> str | None:
    if hour > 24 or minute > 59 or second > 59 or (ampm and not 1 <= hour <= 12):
        return None
    if minute == 0:
        spoken = f"{hour} o'clock" if hour <= 12 else f"{hour} hundred"
        spoken = f"{hour} {ampm}" if ampm else spoken
    else:
        spoken = f"{hour} oh {minute}" if minute < 10 else f"{hour} {minute}"
        spoken = f"{spoken} {ampm}" if ampm else spoken
    return f"{spoken} and {second} seconds" if second else spoken


def english(
    block: Mapped, british: bool, inline: Callable[[Mapped, Callable[[str], str]], Mapped]
) -> Mapped:
    """One block (or a slice of one) of English, markup stripped by `inline`."""
    block = inline(block, english_spell)

    def iso(m: re.Match[str]) -> str:
        return _date(int(m.group(1)), int(m.group(2)), int(m.group(3))) or m.group(0)

    def slashed(m: re.Match[str]) -> str:
        first, second, year = int(m.group(1)), int(m.group(2)), int(m.group(3))
        month, day = (second, first) if british else (first, second)
        if month > 12:
            month, day = day, month
        return _date(year, month, day) or m.group(0)

    def sentence_end(m: re.Match[str], dotted: str | None) -> str:
        """A dotted `p.m.` swallowed a full stop when a capital or the end follows."""
        after = _following(m)
        return "." if dotted and (not after or after.isupper()) else ""

    def clock(m: re.Match[str]) -> str:
        ampm = f"{m.group(4).upper()}M" if m.group(4) else ""
        spoken = _clock(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0), ampm)
        return spoken + sentence_end(m, m.group(5)) if spoken else m.group(0)

    def ampm(m: re.Match[str]) -> list[tuple[int, int] | str]:
        return [m.span(1), f" {m.group(2).upper()}M" + sentence_end(m, m.group(3))]

    def phone(m: re.Match[str]) -> list[tuple[int, int] | str]:
        """Digit by digit, each digit keeping its own place."""
        parts: list[tuple[int, int] | str] = []
        for n in range(1, 4):
            if parts:
                parts.append(", ")
            start = m.start(n)
            for i in range(m.end(n) - start):
                if i:
                    parts.append(" ")
                parts.append((start + i, start + i + 1))
        return parts

    def unit(m: re.Match[str]) -> list[tuple[int, int] | Mapped | str]:
        us, gb = _UNITS[m.group(2)]
        word = (gb if british and gb else us) if m.group(1) == "1" else None
        if word is None:
            singular = gb if british and gb else us
            word = _PLURALS.get(singular, singular + "s")
        return [m.span(1), " ", cur.at(word, *m.span(2))]

    def abbreviation(m: re.Match[str]) -> str:
        found = m.group(1)
        if found in _TITLES:
            return _TITLES[found]
        after = _following(m)
        ends = not after or (after.isupper() and found[:3] not in _MONTH_ABBR)
        return _ENDING[found] + ("." if ends else "")

    if _DIGIT.search(block.text):  # the number rules need a digit
        block = block.sub(_ISO_DATE, iso)
        block = block.sub(_SLASH_DATE, slashed)
        block = block.sub(_TIME, clock)
        block = block.sub(_AMPM, ampm)
        block = block.sub(_PHONE, phone)
        cur = block
        block = cur.sub(_UNIT_RE, unit)
        block = block.sub(_FRACTION_RE, lambda m: _FRACTIONS[m.group(1)])
        block = block.sub(_RANGE, lambda m: [m.span(1), " to ", m.span(2)])
        block = block.sub(_NEGATIVE, "minus ")
        block = block.sub(_APPROX, "about ")
    if "." in block.text:
        block = block.sub(_DOMAIN, lambda m: _dots(m.group(1)))
    if "/" in block.text:
        for pattern, word in _SHORTHAND:
            block = block.sub(pattern, word)
    return block.sub(_ABBREV_RE, abbreviation) if "." in block.text else block
