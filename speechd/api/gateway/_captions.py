"""A cast's words as subtitle files (WebVTT, SubRip) and as JSON, from a cast's `CastWords`.

Cues group consecutive words (or phrases) the way subtitles read: at most two lines of 42
characters and 7 s, a new cue after a sentence end or a pause of a second; a cue stays up
until the next one starts when that is under a second away. WebVTT cues carry each word's
own start as an inline timestamp (`<00:00:01.250>word`), which players use for karaoke-style
read-along; SubRip has no such tag and gets the cue text alone.

A cast's words are learnt a record at a time and kept (`speechd.casts.CastWords`); the files
and the word page made from them are kept too (`Rendered`) until the words change, so asking
again, or many asking at once, costs the cast's head and nothing more.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

import msgspec

from speechd.casts import CastCaptions, CastWord

__all__ = ["Rendered", "WordView", "WordsPage", "srt", "webvtt", "words_page"]

_LINE_CHARS: Final = 42
_CUE_MS: Final = 7000
_PAUSE_MS: Final = 1000  # a silence this long starts a new cue
_HOLD_MS: Final = 1000  # a cue stays up until the next one if it starts this soon
_SENTENCE_END: Final = ".!?\u2026\u3002\uff01\uff1f"
_CLOSERS: Final = "\"')]}\u201d\u2019\u00bb"
_CACHE_BYTES: Final = 64 * 1024 * 1024
_CACHE_ENTRIES: Final = 256


class WordView(msgspec.Struct, frozen=True, omit_defaults=True):
    """One word (or phrase) of `GET /v1/casts/{id}/words`: seconds from the audio's start;
    `source`: where it is in the input as sent, characters [begin, end) (left out when not
    known); a mark (SSML's named point) has `mark` and an empty `word`."""

    word: str
    start: float
    end: float
    source: tuple[int, int] | None = None
    mark: str | None = None


class WordsPage(msgspec.Struct, frozen=True):
    """`GET /v1/casts/{id}/words`. `complete`: the cast is done, these are all its words;
    `unit`: `word` or `phrase` (null while there are none); `duration`: seconds of audio
    the words were read with."""

    id: str
    status: str
    complete: bool
    unit: str | None
    duration: float
    words: list[WordView]


def words_page(cast_id: str, status: str, captions: CastCaptions) -> WordsPage:
    return WordsPage(
        id=cast_id,
        status=status,
        complete=status == "done",
        unit=captions.unit or None,
        duration=captions.audio_ms / 1000,
        words=[
            WordView(w.text, w.start_ms / 1000, w.end_ms / 1000, w.source, w.mark or None)
            for w in captions.words
        ],
    )


class _Cue(msgspec.Struct):
    start_ms: int
    end_ms: int
    words: list[CastWord]


def _clean(text: str) -> str:
    return " ".join(text.split()).replace("-->", "->")


def _ends_sentence(text: str) -> bool:
    return text.rstrip(_CLOSERS)[-1:] in _SENTENCE_END


def _cues(words: list[CastWord]) -> list[_Cue]:
    cues: list[_Cue] = []
    line, used = 0, 0  # the current cue's line being filled, and its length so far
    for word in words:
        text = _clean(word.text)
        if not text:
            continue
        word = CastWord(text, word.start_ms, word.end_ms)
        cue = cues[-1] if cues else None
        if (
            cue is not None
            and word.end_ms - cue.start_ms <= _CUE_MS
            and word.start_ms - cue.end_ms < _PAUSE_MS
            and not _ends_sentence(cue.words[-1].text)
        ):
            if used + 1 + len(text) <= _LINE_CHARS:
                used += 1 + len(text)
            elif line == 0:  # on to the second line
                line, used = 1, len(text)
            else:
                cue = None
            if cue is not None and used <= _LINE_CHARS:
                cue.words.append(word)
                cue.end_ms = max(cue.end_ms, word.end_ms)
                continue
        cues.append(_Cue(word.start_ms, word.end_ms, [word]))
        line, used = (0, len(text)) if len(text) <= _LINE_CHARS else (1, _LINE_CHARS)
    for cue, following in itertools.pairwise(cues):
        if following.start_ms - cue.end_ms < _HOLD_MS:
            cue.end_ms = max(cue.end_ms, following.start_ms)
    for cue in cues:
        cue.end_ms = max(cue.end_ms, cue.start_ms + 1)  # a cue that ends as it starts is void
    return cues


def _lines(words: list[CastWord]) -> list[list[CastWord]]:
    """The cue's words in one line, or two of balanced length when over `_LINE_CHARS` (a
    break after a comma or clause end is worth a few characters of balance)."""
    total = sum(len(w.text) for w in words) + len(words) - 1
    if total <= _LINE_CHARS or len(words) < 2:
        return [words]
    costs = []
    run = -1
    for i in range(1, len(words)):
        run += len(words[i - 1].text) + 1  # the first line's length
        rest = total - run - 1
        bonus = 8 if words[i - 1].text[-1:] in ",;:" else 0
        costs.append((max(run, rest) > _LINE_CHARS, abs(run - rest) - bonus, i))
    _, _, best = min(costs)
    return [words[:best], words[best:]]


def _stamp(ms: int, mark: str) -> str:
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}{mark}{millis:03d}"


def _escape_vtt(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def webvtt(captions: CastCaptions) -> str:
    """The captions as a WebVTT file, each word's start an inline timestamp in its cue."""
    out = ["WEBVTT\n"]
    for n, cue in enumerate(_cues(captions.words), 1):
        last = cue.start_ms
        lines = []
        for line in _lines(cue.words):
            parts = []
            for word in line:
                text = _escape_vtt(word.text)
                if last < word.start_ms < cue.end_ms:  # strictly inside the cue, increasing
                    text = f"<{_stamp(word.start_ms, '.')}>{text}"
                    last = word.start_ms
                parts.append(text)
            lines.append(" ".join(parts))
        timing = f"{_stamp(cue.start_ms, '.')} --> {_stamp(cue.end_ms, '.')}"
        out.append(f"\n{n}\n{timing}\n" + "\n".join(lines) + "\n")
    return "".join(out)


def srt(captions: CastCaptions) -> str:
    """The captions as a SubRip file (cues only: SubRip has no per-word times)."""
    out = []
    for n, cue in enumerate(_cues(captions.words), 1):
        text = "\n".join(" ".join(w.text for w in line) for line in _lines(cue.words))
        timing = f"{_stamp(cue.start_ms, ',')} --> {_stamp(cue.end_ms, ',')}"
        out.append(f"{n}\n{timing}\n{text}\n")
    return "\n".join(out)


class Rendered:
    """Each cast's caption files and word page as last made, with what they were made from
    (`version`: the words' stream birth, count and audio length, and the cast's state), so a
    request whose words have not changed since gets the same bytes: made once, on a worker
    thread, however many ask at once. The least recently asked for go past `max_bytes` or
    `max_entries`."""

    def __init__(self, max_bytes: int = _CACHE_BYTES, max_entries: int = _CACHE_ENTRIES) -> None:
        self._max_bytes = max_bytes
        self._max_entries = max_entries
        self._kept: OrderedDict[tuple[str, str], tuple[object, asyncio.Future[bytes]]] = (
            OrderedDict()
        )

    async def get(
        self, cast_id: str, kind: str, version: object, make: Callable[[], bytes]
    ) -> bytes:
        """`make()`'s bytes for `(cast_id, kind)` at `version`: made now (off the loop), or
        as made for that version before."""
        key = (cast_id, kind)
        found = self._kept.pop(key, None)
        if found is None or found[0] != version:
            found = (version, asyncio.ensure_future(asyncio.to_thread(make)))
        self._kept[key] = found
        made = found[1]
        try:
            data = await asyncio.shield(made)
        except BaseException:
            if made.done() and self._kept.get(key, (None, None))[1] is made:
                del self._kept[key]  # it failed: the next request makes it again
            raise
        self._bound()
        return data

    def _bound(self) -> None:
        total = sum(_size(made) for _, made in self._kept.values())
        for key, (_, made) in list(self._kept.items()):
            if total <= self._max_bytes and len(self._kept) <= self._max_entries:
                return
            if made.done():  # one still being made stays until it is
                del self._kept[key]
                total -= _size(made)


def _size(made: asyncio.Future[bytes]) -> int:
    if not made.done() or made.cancelled() or made.exception() is not None:
        return 0
    return len(made.result())
