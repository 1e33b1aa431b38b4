"""What users paste, made speakable: `normalize_text`.

misaki (the English G2P) already reads cardinals, ordinals, years, decimals, `$`/`£`/`€`
amounts, `%`, `&`, `+`, `@`, `Dr.`, `Mr.`, `Mrs.`, `vs.`, `e.g.`, `i.e.`, `etc.` and `No. 5`
well, so those are left alone. This module does what misaki does not:

* every language: Unicode NFC, HTML entities and tags, control and zero-width characters,
  odd spaces, emoji, Markdown (headings, emphasis, code, links, images, lists, quotes,
  tables, rules), repeated `!!!`/`???`, soft-wrapped lines joined, and a `.` closing each
  block (heading, list item, paragraph) that lacks one, so blocks are read as sentences;
* English (`a`, `b`) only: URLs and e-mail addresses spelt out (`example dot com`), ISO and
  slashed dates (`January 15th 2024`), clock times (`3 30 PM`, `9 oh 5`), phone numbers
  digit by digit, negative numbers (`minus 5`), numeric ranges (`10 to 20`), units after a
  number (`5 km` -> `5 kilometers`), common fractions, and the abbreviations misaki misreads
  (`Prof.`, `Jr.`, `Jan.`, `approx.`, `Inc.`, ...).

The result keeps one block per line (`\n` between blocks, single spaces inside) and never
starts or ends with whitespace; it may be empty (text of emoji only). misaki's inline
pronunciation markup, `[word](/phonemes/)`, is kept for English.
"""

from __future__ import annotations

import calendar
import html
import re
import unicodedata
from collections.abc import Callable
from typing import Final

__all__ = ["normalize_text"]

# ---------------------------------------------------------------- characters

_NEWLINES = re.compile(r"\r\n?|[\u2028\u2029\x0b\x0c\x85]")
_ZERO_WIDTH = re.compile(r"[\u00ad\u180e\u200b-\u200d\u2060\ufeff]")
_SPACES = re.compile(r"[\t\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]")
_EMOJI = re.compile(
    "["
    "\U0001f000-\U0001faff"  # cards, enclosed, pictographs, emoticons, transport, ...
    "\u2600-\u27bf"  # misc symbols, dingbats
    "\u2b00-\u2bff"  # arrows and stars used as emoji (⭐, ⬆)
    "\u231a\u231b\u23e9-\u23fa\u24c2\u3030\u303d\u3297\u3299"
    "\ufe00-\ufe0f\u20e3"  # variation selectors, keycap
    "\U000e0020-\U000e007f"  # tag sequences (flags)
    "\U0001f3fb-\U0001f3ff"  # skin tones
    "]+"
)


def _clean_chars(text: str) -> str:
    text = unicodedata.normalize("NFC", html.unescape(text))
    text = _NEWLINES.sub("\n", text)
    text = _ZERO_WIDTH.sub("", text)
    text = _SPACES.sub(" ", text)
    text = _EMOJI.sub(" ", text)
    # Control, format, unassigned and private-use characters (the last are our placeholders).
    return "".join(c for c in text if c == "\n" or unicodedata.category(c)[0] != "C")


# ---------------------------------------------------------------- markdown blocks

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$")
_RULE = re.compile(r"^\s*(?:(?:-\s*){3,}|(?:\*\s*){3,}|(?:_\s*){3,}|(?:=\s*){3,})$")
_QUOTE = re.compile(r"^\s*(?:>\s?)+")
_BULLET = re.compile(r"^\s*[-*+•◦▪‣]\s+")
_ORDERED = re.compile(r"^\s*(\d{1,3})[.)]\s+")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)*\|?\s*$")
_REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s+\S+.*$")
_TERMINAL: Final = ".!?…:;"
_CLOSERS: Final = "\"'\u201d\u2019)]\u00bb"
#: A line this long that ends without punctuation is taken as hard-wrapped prose.
_WRAP_WIDTH: Final = 40


def _blocks(text: str) -> list[str]:
    """Split into blocks (paragraphs, headings, items, rows) with block markup removed."""
    blocks: list[str] = []
    para: list[str] = []
    in_fence = False

    def flush() -> None:
        if para:
            blocks.append(" ".join(para))
            para.clear()

    for raw in text.split("\n"):
        if _FENCE.match(raw):
            flush()
            in_fence = not in_fence
            continue
        if in_fence:
            flush()
            blocks.append(raw)
            continue
        line = _QUOTE.sub("", raw).strip()
        if not line or _RULE.match(line) or _TABLE_RULE.match(line) or _REF_DEF.match(line):
            flush()
            continue
        heading = _HEADING.match(line)
        if heading:
            flush()
            blocks.append(heading.group(1))
            continue
        if line.startswith("|") and line.endswith("|") and len(line) > 1:
            flush()
            blocks.append(", ".join(c.strip() for c in line[1:-1].split("|") if c.strip()))
            continue
        item = _BULLET.match(line)
        if item:
            flush()
            para.append(line[item.end() :])
            continue
        if _ORDERED.match(line):
            flush()
            para.append(line)
            continue
        if para and not _joins(para[-1]):
            flush()
        para.append(line)
    flush()
    return blocks


def _joins(previous: str) -> bool:
    """Does a line break after `previous` continue the same sentence (a soft wrap)?"""
    tail = previous.rstrip(_CLOSERS)
    if not tail or tail[-1] in _TERMINAL:
        return False
    return len(previous) >= _WRAP_WIDTH or tail[-1] in ",\u2014\u2013-"


# ---------------------------------------------------------------- inline markdown

_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
_PRONOUNCE = re.compile(r"\[[^\]\n]+\]\((?:/[^/\n)]+/|[+-]?\d+(?:\.\d+)?|#[^#\n)]+#)\)")
_LINK = re.compile(r"\[([^\]\n]+)\]\([^)\n]*\)")
_REF_LINK = re.compile(r"\[([^\]\n]+)\]\[[^\]\n]*\]")
_AUTOLINK = re.compile(r"<((?:https?://|mailto:)[^>\s]+|[^@>\s]+@[^>\s]+)>")
_CODE = re.compile(r"(`+)(.+?)\1")
_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9-]*(?:\s[^<>]*)?/?>")
_STRONG = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_EM_STAR = re.compile(r"(?<![\w*])\*(?=\S)(.+?)(?<=\S)\*(?![\w*])")
_EM_UNDER = re.compile(r"(?<![\w_])_(?=\S)(.+?)(?<=\S)_(?![\w_])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_URL = re.compile(r"\b(?:https?://|www\.)[^\s<>\"']+", re.IGNORECASE)
_EMAIL = re.compile(r"\b[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+\b")
_TRAILING = ".,;:!?)]}'\""
_REPEATED = re.compile(r"([!?])\1+|(\.)\.{3,}")


def _inline(block: str, spell: Callable[[str], str]) -> str:
    """Strip inline markup; URLs and e-mails go through `spell`, shielded from the rest."""
    kept: list[str] = []

    def shield(text: str) -> str:
        kept.append(text)
        return f"\ue000{len(kept) - 1}\ue001"

    block = _AUTOLINK.sub(lambda m: m.group(1).removeprefix("mailto:"), block)
    block = _PRONOUNCE.sub(lambda m: shield(m.group(0)), block)
    block = _IMAGE.sub(lambda m: m.group(1), block)
    block = _LINK.sub(lambda m: m.group(1), block)
    block = _REF_LINK.sub(lambda m: m.group(1), block)
    block = _CODE.sub(lambda m: m.group(2).strip(), block)
    block = _TAG.sub(" ", block)

    def url(m: re.Match[str]) -> str:
        found = m.group(0)
        core = found.rstrip(_TRAILING)
        return shield(spell(core)) + found[len(core) :]

    block = _URL.sub(url, block)
    block = _EMAIL.sub(lambda m: shield(spell(m.group(0))), block)
    for pattern in (_STRONG, _STRIKE):
        block = pattern.sub(lambda m: m.group(2) if m.lastindex == 2 else m.group(1), block)
    block = _EM_STAR.sub(lambda m: m.group(1), block)
    block = _EM_UNDER.sub(lambda m: m.group(1), block)
    block = _REPEATED.sub(lambda m: m.group(1) or "...", block)
    return re.sub(r"\ue000(\d+)\ue001", lambda m: kept[int(m.group(1))], block)


def _neutral_spell(found: str) -> str:
    """Outside English: a URL is read as its host name; an address as written."""
    if "@" in found and "/" not in found:
        return found
    host = re.sub(r"^(?:https?://)?(?:www\.)?", "", found, flags=re.IGNORECASE)
    return re.split(r"[/?#]", host, maxsplit=1)[0]


def _english_spell(found: str) -> str:
    """`https://www.example.com/a-b/c?x=1` -> `example dot com slash a b slash c`."""
    if "@" in found and "/" not in found:
        user, _, host = found.partition("@")
        return f"{_dots(user)} at {_dots(host)}"
    rest = re.sub(r"^(?:https?://)?(?:www\.)?", "", found, flags=re.IGNORECASE)
    rest = re.split(r"[?#]", rest, maxsplit=1)[0]
    host, *path = [p for p in rest.split("/") if p]
    words = [_dots(host), *(re.sub(r"[-_.+=]+", " ", p).strip() for p in path)]
    return " slash ".join(w for w in words if w)


def _dots(name: str) -> str:
    return " dot ".join(p for p in re.split(r"[.]", name) if p).replace("_", " underscore ")


# ---------------------------------------------------------------- English

_MONTHS: Final = list(calendar.month_name)[1:]
_ABBREVIATIONS: Final = {
    # titles: never end a sentence
    "Prof.": "Professor", "Jr.": "Junior", "Sr.": "Senior", "Gen.": "General",
    "Capt.": "Captain", "Lt.": "Lieutenant", "Sgt.": "Sergeant", "Col.": "Colonel",
    "Rev.": "Reverend", "Hon.": "Honorable", "Gov.": "Governor", "Sen.": "Senator",
    "Pres.": "President", "Mt.": "Mount", "Ft.": "Fort",
}  # fmt: skip
_ABBREVIATIONS_END: Final = {
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
_ABBREV_RE = re.compile(
    r"(?<![\w.])("
    + "|".join(re.escape(a) for a in sorted([*_ABBREVIATIONS, *_ABBREVIATIONS_END], key=len)[::-1])
    + r")"
)
_SHORTHAND: Final = {"w/o": "without", "w/": "with"}
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
_NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_UNIT_RE = re.compile(
    rf"(?<![\w.])({_NUMBER})\s?("
    + "|".join(re.escape(u) for u in sorted(_UNITS, key=len)[::-1])
    + r")(?![\w/])"
)
_FRACTIONS: Final = {
    "1/2": "one half", "1/3": "one third", "2/3": "two thirds", "1/4": "one quarter",
    "3/4": "three quarters", "1/8": "one eighth",
}  # fmt: skip
_FRACTION_RE = re.compile(r"(?<![\w/])(1/2|1/3|2/3|1/4|3/4|1/8)(?![\w/])")
_ISO_DATE = re.compile(r"(?<![\w-])(\d{4})-(\d{1,2})-(\d{1,2})(?![\w-])")
_SLASH_DATE = re.compile(r"(?<![\w/])(\d{1,2})/(\d{1,2})/(\d{4})(?![\w/])")
_TIME = re.compile(
    r"(?<![\w:])(\d{1,2}):(\d{2})(?::(\d{2}))?"
    r"(?:\s?([AaPp])(?:(\.)\s?[Mm]\.|\s?[Mm])(?![A-Za-z]))?(?![\w:])"
)
_AMPM = re.compile(r"(?<![\w.])(\d{1,2})\s?([AaPp])(?:(\.)\s?[Mm]\.|\s?[Mm])(?![\w])")
_PHONE = re.compile(r"(?<![\w+])(?:\+?1[ .-])?\(?(\d{3})\)?[ .-](\d{3})[ .-](\d{4})(?![\w-])")
_NEGATIVE = re.compile("(?:(?<![\\w.,-])-|\u2212)(?=\\d)")
_RANGE = re.compile("(?<![\\w.,-])(\\d+(?:\\.\\d+)?)\\s?[-\u2013]\\s?(\\d+(?:\\.\\d+)?)(?![\\w-])")
_APPROX = re.compile(r"(?<!\S)~(?=\d)")
_DOMAIN = re.compile(
    r"(?<![\w@.])((?:[A-Za-z0-9-]+\.)+(?:com|org|net|io|dev|ai|app|edu|gov|co|info|me))(?!\w|\.\w)"
)


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


def _english(block: str, british: bool) -> str:
    block = _inline(block, _english_spell)

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
        after = m.string[m.end() :].lstrip()
        return "." if dotted and (not after or after[0].isupper()) else ""

    def clock(m: re.Match[str]) -> str:
        ampm = f"{m.group(4).upper()}M" if m.group(4) else ""
        spoken = _clock(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0), ampm)
        return spoken + sentence_end(m, m.group(5)) if spoken else m.group(0)

    def ampm(m: re.Match[str]) -> str:
        return f"{m.group(1)} {m.group(2).upper()}M" + sentence_end(m, m.group(3))

    def unit(m: re.Match[str]) -> str:
        us, gb = _UNITS[m.group(2)]
        word = (gb if british and gb else us) if m.group(1) == "1" else None
        if word is None:
            singular = gb if british and gb else us
            word = _PLURALS.get(singular, singular + "s")
        return f"{m.group(1)} {word}"

    def abbreviation(m: re.Match[str]) -> str:
        found = m.group(1)
        if found in _ABBREVIATIONS:
            return _ABBREVIATIONS[found]
        word = _ABBREVIATIONS_END[found]
        after = m.string[m.end() :].lstrip()
        ends = not after or (after[0].isupper() and found[:3] not in _MONTH_ABBR)
        return word + ("." if ends else "")

    block = _ISO_DATE.sub(iso, block)
    block = _SLASH_DATE.sub(slashed, block)
    block = _TIME.sub(clock, block)
    block = _AMPM.sub(ampm, block)
    block = _PHONE.sub(lambda m: ", ".join(" ".join(g) for g in m.groups()), block)
    block = _UNIT_RE.sub(unit, block)
    block = _FRACTION_RE.sub(lambda m: _FRACTIONS[m.group(1)], block)
    block = _RANGE.sub(r"\1 to \2", block)
    block = _NEGATIVE.sub("minus ", block)
    block = _APPROX.sub("about ", block)
    block = _DOMAIN.sub(lambda m: _dots(m.group(1)), block)
    for short, word in _SHORTHAND.items():
        block = re.sub(rf"(?<!\w){re.escape(short)}(?=\s)", word, block)
    return _ABBREV_RE.sub(abbreviation, block)


_MONTH_ABBR: Final = frozenset(m[:3] for m in _MONTHS)
_SPACE_BEFORE_PUNCT = re.compile(r" +([,.!?;:…](?:\s|$))")


# ---------------------------------------------------------------- entry point


def normalize_text(text: str, lang: str = "a") -> str:
    """Make pasted text speakable for the language `lang` (a voice's prefix letter)."""
    english = lang in ("a", "b")
    out: list[str] = []
    for block in _blocks(_clean_chars(text)):
        block = _english(block, lang == "b") if english else _inline(block, _neutral_spell)
        block = _SPACE_BEFORE_PUNCT.sub(r"\1", re.sub(r" {2,}", " ", block)).strip()
        if any(c.isalnum() for c in block):
            out.append(block)
    for i, block in enumerate(out[:-1]):
        if block.rstrip(_CLOSERS)[-1:] not in _TERMINAL:
            out[i] = block + "."
    return "\n".join(out)
