"""The cost-model engine's incremental planner: `speechd.text.Planner`'s contract on words.

A closed text plans exactly as `CostEngine.plan` does (2, 4, 8, ... words per chunk, up to the
policy's `max_words`), so `expected_audio` still names the bytes of a whole-text cast. Text fed
piece by piece (a live cast) is cut as the real planner cuts it: a chunk needs its words
complete (followed by a space, or the input closed); fewer words than the chunk's size are
spoken only up to the last clause or sentence end among them, unless the input has been idle
`flush_s` (then all that arrived, a half word included) or is closed. Each step scans at most
`slice_chars` characters, so no step is long, whatever the text.

Positions are JSON `[raw offset of the next chunk's first word, chunk index, its size]`; a
planner given one (and the same text from its start) goes on with the chunks that follow.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any

from speechd.text import PlanStatus
from speechd.text._chunks import Unit
from speechd.text._planner import PlanStep

__all__ = ["FakePlanner", "WordG2P"]

_CLAUSE_ENDS = tuple(".,;:!?")


class FakePlanner:
    def __init__(
        self,
        first_words: int,
        max_words: int,
        *,
        text: str = "",
        done: bool = False,
        position: str | None = None,
        flush_s: float = 0.6,
        slice_chars: int = 2000,
        audio_per_char: float = 0.02,
        speed: float = 1.0,
        silent: str = "",
        chunk_type: type = tuple,
    ) -> None:
        self._max = max_words
        self._size = first_words
        self._index = 0
        self._flush_s = flush_s
        self._slice = slice_chars
        self._audio_per_char = audio_per_char / speed
        self._silent = silent
        self._chunk = chunk_type
        self._raw = ""
        self._scan = 0  # raw text scanned up to here
        self._word_start: int | None = None  # an unfinished word being scanned
        self._words: deque[tuple[int, int]] = deque()  # complete words, (start, end)
        self._cursor = 0  # where the next chunk's text starts
        self._closed = False
        self._flushed = -1  # the text received when flush() was called
        self.retimed: list[tuple[int, Any]] = []
        if position is not None:
            offset, self._index, self._size = json.loads(position)
            self._scan = self._cursor = int(offset)
        if text:
            self.feed(text)
        if done:
            self.close()

    def feed(self, piece: str) -> None:
        if self._closed:
            raise ValueError("the planner's input is closed")
        self._raw += piece

    def close(self) -> None:
        self._closed = True

    def flush(self) -> None:
        self._flushed = len(self._raw)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def position(self) -> str:
        start = self._words[0][0] if self._words else (self._word_start or self._scan)
        return json.dumps([max(start, self._cursor), self._index, self._size])

    @property
    def chars_left(self) -> int:
        return max(len(self._raw) - self._cursor, 0)

    @property
    def audio_left_s(self) -> float:
        return self.chars_left * self._audio_per_char

    def retime(self, policy: Any) -> None:
        """Recorded only (`retimed`: the next chunk's index, and the policy): the fake's
        chunks are sized in words, whatever the policy's budgets."""
        self.retimed.append((self._index, policy))

    def estimate(self) -> list[int]:
        """The sizes (characters, the fake's phonemes) of the chunks the text not in a chunk
        yet makes, at the sizes `_cut` doubles through."""
        rest = self._raw[self._cursor :]
        words = len(rest.split())
        per_word = len(rest.strip()) / max(words, 1)
        sizes, size = [], self._size
        while words > 0:
            n = min(size, words)
            sizes.append(max(round(n * per_word), 1))
            words -= n
            size = min(size * 2, self._max)
        return sizes

    def step(self, idle_s: float | None = None) -> PlanStep:
        if len(self._words) >= self._size:
            return self._cut(self._size)
        if self._scan < len(self._raw):
            self._scan_slice()
            return PlanStep(PlanStatus.MORE, chars_left=self.chars_left)
        received = len(self._raw)
        if self._closed or self._flushed == received:
            self._end_word()
            if self._closed and self._raw.strip() == self._silent and self._silent:
                self._words.clear()
            if self._words:
                return self._cut(len(self._words))
            if self._closed:
                return PlanStep(PlanStatus.DONE)
            return PlanStep(PlanStatus.INPUT, chars_left=self.chars_left)
        ends = [n for n, (s, e) in enumerate(self._words) if self._raw[e - 1] in _CLAUSE_ENDS]
        if ends:
            return self._cut(ends[-1] + 1)
        if idle_s is not None and idle_s >= self._flush_s and received > self._cursor:
            self.flush()
            return PlanStep(PlanStatus.MORE, chars_left=self.chars_left)
        return PlanStep(PlanStatus.INPUT, chars_left=self.chars_left)

    def _scan_slice(self) -> None:
        stop = min(self._scan + self._slice, len(self._raw))
        raw = self._raw
        for at in range(self._scan, stop):
            if raw[at].isspace():
                if self._word_start is not None:
                    self._words.append((self._word_start, at))
                    self._word_start = None
            elif self._word_start is None:
                self._word_start = at
        self._scan = stop

    def _end_word(self) -> None:
        if self._word_start is not None:
            self._words.append((self._word_start, len(self._raw)))
            self._word_start = None

    def _cut(self, n: int) -> PlanStep:
        words = [self._words.popleft() for _ in range(n)]
        text = " ".join(self._raw[s:e] for s, e in words)
        self._cursor = words[-1][1]
        chunk = self._chunk(self._index, text, text.lower(), tuple(words))
        self._index += 1
        self._size = min(self._size * 2, self._max)
        return PlanStep(PlanStatus.CHUNK, chunk, self.chars_left)


class WordG2P:
    """A G2P double for `speechd.text.Planner`: a unit per word, its letters and
    punctuation for phonemes (the real normaliser, slicer and chunker run around it)."""

    lang = "a"

    def units(self, text: str) -> list[Unit]:
        words = text.split(" ")
        return [
            Unit(
                word + (" " if i < len(words) - 1 else ""),
                "".join(c for c in word.lower() if c.isalpha() or c in ".,;:!?")
                + (" " if i < len(words) - 1 else ""),
                phrase_start=word[:1].isupper(),
            )
            for i, word in enumerate(words)
        ]
