"""Inline Markdown, links and addresses, made speakable: one block (or a slice of one) at a
time, every rule linear (see `_normalize`), every character mapped back (`Mapped`).

`normalize_piece` is what `_normalize` runs on each block it reads: English (`_english`) or
the language-neutral steps, then spaces tidied and runs of more than `WORD_CHARS` characters
without a space cut into words. misaki's inline pronunciation markup, `[word](/phonemes/)`,
is shielded from every rule and kept whole.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from typing import Final

from ._english import EMAIL, URL, english, neutral_spell
from ._mapped import Mapped

__all__ = ["LONG_RUN", "MULTI_SPACE", "SPAN", "WORD_CHARS", "normalize_piece", "split_run"]

#: The most characters an inline span (link text, emphasis, code, a tag) may hold.
SPAN: Final = 300
#: No word (a run without spaces) handed to a G2P is longer than this.
WORD_CHARS: Final = 48

_LINK_TARGET = r"\([^()\s]{0,512}(?:\s{1,8}\"[^\"\n]{0,300}\")?\)"
_IMAGE = re.compile(r"!\[([^\[\]\n]{0,300})\]" + _LINK_TARGET)
_PRONOUNCE = re.compile(
    r"\[[^\[\]\n]{1,100}\]\((?:/[^/\n()]{1,200}/|[+-]?\d{1,2}(?:\.\d{1,2})?|#[^#\n()]{1,100}#)\)"
)
_LINK = re.compile(r"\[([^\[\]\n]{1,300})\]" + _LINK_TARGET)
_REF_LINK = re.compile(r"\[([^\[\]\n]{1,300})\]\[[^\[\]\n]{0,100}\]")
_AUTOLINK = re.compile(r"<((?:https?://|mailto:)[^<>\s]{1,512}|[^<>@\s]{1,64}@[^<>@\s]{1,255})>")
_TICKS = re.compile(r"`+")
_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9-]{0,30}(?:\s[^<>]{0,300})?/?>")
# Emphasis holds no character of its own marker, so an attempt ends at the next marker.
_EMPHASIS = (
    ("**", re.compile(r"\*\*(?=\S)([^*\n]{1,300}?)(?<=\S)\*\*")),
    ("__", re.compile(r"__(?=\S)([^_\n]{1,300}?)(?<=\S)__")),
    ("~~", re.compile(r"~~(?=\S)([^~\n]{1,300}?)(?<=\S)~~")),
    ("*", re.compile(r"(?<![\w*])\*(?=\S)([^*\n]{1,300}?)(?<=\S)\*(?![\w*])")),
    ("_", re.compile(r"(?<![\w_])_(?=\S)([^_\n]{1,300}?)(?<=\S)_(?![\w_])")),
)
_URL_HINT = re.compile(r"://|www\.", re.IGNORECASE)
_TRAILING = ".,;:!?)]}'\""
_REPEATED = re.compile(r"([!?])\1+|(\.)\.{3,}")
_SHIELDED = re.compile(r"\ue000(\d{1,6})\ue001")
MULTI_SPACE = re.compile(r" {2,}")
_SPACE_BEFORE_PUNCT = re.compile(r" ([,.!?;:…](?:\s|$))")
LONG_RUN = re.compile(rf"(?<!\S)\S{{{WORD_CHARS + 1},}}")


def _code_spans(block: Mapped) -> Mapped:
    """`code` -> code: a run of backticks opens a span the next run of the same length
    closes, at most SPAN characters on (CommonMark's rule, in one pass)."""
    runs = [(m.start(), m.end()) for m in _TICKS.finditer(block.text)]
    if len(runs) < 2:
        return block
    closer: list[int | None] = [None] * len(runs)
    seen: dict[int, int] = {}
    for i in range(len(runs) - 1, -1, -1):
        width = runs[i][1] - runs[i][0]
        closer[i] = seen.get(width)
        seen[width] = i
    out: list[Mapped | str] = []
    pos = i = 0
    while i < len(runs):
        j = closer[i]
        if j is not None and 0 < runs[j][0] - runs[i][1] <= SPAN:
            out += (block[pos : runs[i][0]], block[runs[i][1] : runs[j][0]].strip())
            pos = runs[j][1]
            i = j + 1
        else:
            i += 1
    if pos == 0:
        return block
    out.append(block[pos:])
    return Mapped.concat(out)


def inline(block: Mapped, spell: Callable[[str], str]) -> Mapped:
    """Strip inline markup; URLs and e-mails go through `spell`, shielded from the rest."""
    kept: list[Mapped] = []

    def shield(text: Mapped) -> str:
        kept.append(text)
        return f"\ue000{len(kept) - 1}\ue001"

    def group(n: int) -> Callable[[re.Match[str]], list[tuple[int, int]]]:
        return lambda m: [m.span(n)]

    if "<" in block.text:
        block = block.sub(
            _AUTOLINK,
            lambda m: [(m.start(1) + (7 if m.group(1).startswith("mailto:") else 0), m.end(1))],
        )
    if "[" in block.text:
        cur = block
        block = cur.sub(_PRONOUNCE, lambda m: shield(cur[m.start() : m.end()]))
        block = block.sub(_IMAGE, group(1)).sub(_LINK, group(1)).sub(_REF_LINK, group(1))
    if "`" in block.text:
        block = _code_spans(block)
    if "<" in block.text:
        block = block.sub(_TAG, " ")

    def url(m: re.Match[str]) -> list[Mapped | str | tuple[int, int]]:
        found = m.group(0)
        core = found.rstrip(_TRAILING)
        spelled = cur.at(spell(core), m.start(), m.start() + len(core))
        return [shield(spelled), (m.start() + len(core), m.end())]

    if _URL_HINT.search(block.text):
        cur = block
        block = cur.sub(URL, url)
    if "@" in block.text:
        cur = block
        block = cur.sub(EMAIL, lambda m: shield(cur.at(spell(m.group(0)), *m.span())))
    for marker, pattern in _EMPHASIS:
        if marker in block.text:
            block = block.sub(pattern, group(1))
    block = block.sub(_REPEATED, lambda m: m.group(1) or "...")
    return block.sub(_SHIELDED, lambda m: kept[int(m.group(1))]) if kept else block


def split_run(m: re.Match[str], *, markup: bool = True) -> list[tuple[int, int] | str]:
    """A run of more than `WORD_CHARS` characters without a space, as words of at most that
    many (spans of the text, spaces between)."""
    run = m.group(0)
    if markup and len(run) <= 3 * SPAN // 2 and _PRONOUNCE.search(run):
        return [m.span()]  # pronunciation markup is read as a whole
    pieces: list[tuple[int, int] | str] = []
    i = 0
    while i < len(run):
        j = min(i + WORD_CHARS, len(run))
        while j < len(run) and unicodedata.combining(run[j]):
            j += 1
        if pieces:
            pieces.append(" ")
        pieces.append((m.start() + i, m.start() + j))
        i = j
    return pieces


def normalize_piece(text: Mapped, lang: str) -> Mapped:
    """A block (or a slice of one cut where no rule can span the cut), normalised."""
    english_ = lang in ("a", "b")  # else the language-neutral steps only
    text = english(text, lang == "b", inline) if english_ else inline(text, neutral_spell)
    text = text.sub(MULTI_SPACE, " ").sub(_SPACE_BEFORE_PUNCT, group_one).strip()
    if lang not in ("j", "z") and len(text) > WORD_CHARS:  # they are written without spaces
        text = text.sub(LONG_RUN, split_run)
    return text


def group_one(m: re.Match[str]) -> list[tuple[int, int]]:
    """A rule's replacement that keeps only its first group."""
    return [m.span(1)]
