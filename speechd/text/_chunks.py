"""Progressive chunk planning: pure, fast, torch-free.

The G2P turns text into *units* (a word in English, a short phrase where the G2P only takes
whole phrases) each with its phonemes; `iter_chunks` groups units into chunks that the model
synthesizes one at a time. A chunk is cut only between units, never inside a word, at the
strongest boundary its token budget allows: a sentence end, then a clause (`;` `:`), then a
comma or dash, then (English) a phrase start before a verb, preposition, conjunction or
determiner, then between two words, and after a word that leans on the next ("the",
"below", "narrow") only as a last resort. No chunk exceeds the model's 510-token context.
A pause (SSML `break`) is never part of a chunk of speech: it is a silent chunk of its own
(`Chunk.silent`), at most `SILENCE_CHUNK_MS`, which the worker writes without the model.

Budgets grow as the listener's buffer does (`ChunkPolicy`): the first chunk is a clause or
the first few words, so audio starts fast; the second is at most the rest of a sentence; later
ones hold several sentences up to ~250 tokens, or up to `max_chunk_s` of audio where the
worker caps what one chunk may cost (a chunk cannot be interrupted: its compute time is how
long a newcomer may wait). While the device is slower than the audio it makes, growth is also
bounded by the buffer: simulating playback, the planner lets the next chunk cost at most
`margin * buffered` seconds of compute (`overhead_s + rtf * audio`), so it is ready before the
audio already made runs out; and the first chunk is long enough to buy the buffer a
floor-sized second chunk needs.
"""

import bisect
import logging
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Annotated, Final

import msgspec

from ._spans import NO_SOURCE, Span, word_spans

__all__ = [
    "MAX_SPEED",
    "MIN_SPEED",
    "MODEL_MAX_TOKENS",
    "SILENCE_CHUNK_MS",
    "Boundary",
    "Chunk",
    "ChunkPolicy",
    "Chunker",
    "Unit",
    "iter_chunks",
]

log = logging.getLogger("speechd.text")

#: Kokoro-82M reads at most 512 tokens: 510 phonemes between its start and end markers.
MODEL_MAX_TOKENS: Final = 510
#: The speeds Kokoro-82M is run at (a request's, times SSML's `prosody rate`): the one place
#: they are written; every request shape and check reads them from here.
MIN_SPEED: Final = 0.25
MAX_SPEED: Final = 4.0
#: The most silence one chunk holds: a longer pause is written as several chunks, so no more
#: than this is ever made at once, and a worker that dies in a long pause loses at most this.
#: A break is at most as long (`_ssml.MAX_BREAK_MS`), and a chunk holds whole breaks.
SILENCE_CHUNK_MS: Final = 10_000


class Chunk(msgspec.Struct, frozen=True):
    """One unit of synthesis: its source text (a caption), the phonemes the model reads, and
    its units' places in those phonemes (`words`: words in English, else phrases; see
    `_spans`).

    From the front end's markup (SSML): `rate` multiplies the cast's speed for this chunk
    (`prosody rate`). A pause (`break`) is a chunk of its own, `silent`: no phonemes and no
    text, silence the worker writes and no model makes, at most `SILENCE_CHUNK_MS` (a longer
    pause is several), its words the marks just before it. Its silence is `lead_ms` when
    speech follows it at once (that speech keeps a little silence of its own before its
    voice, which this one leaves out: `speechd.engine.silence`), else `pause_ms`. A chunk of
    speech never holds a pause: its `pause_ms` is the pause right after it (its speech then
    keeps no silence after its voice) and its `lead_ms` is 0. A silent chunk moves neither
    the chunker's `index` nor its buffer: it has the index of the speech after it.

    `voice` is the voice a chunk is read with (`<voice>`: a spec; "" the plan's own, the
    cast's voice), and a chunk never spans a change of voice; `lang` the language code of
    the G2P that read its first word (`xml:lang`, or a `<voice>` of another language; ""
    the plan's own)."""

    index: int
    text: str
    phonemes: str
    words: tuple[Span, ...] = ()
    rate: float = 1.0
    pause_ms: int = 0
    lead_ms: int = 0
    voice: str = ""
    lang: str = ""

    @property
    def tokens(self) -> int:
        return len(self.phonemes)

    @property
    def silent(self) -> bool:
        """A pause: silence, no speech (see the class docstring)."""
        return not self.phonemes


_Tokens = Annotated[int, msgspec.Meta(ge=1, le=MODEL_MAX_TOKENS)]


class ChunkPolicy(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How chunks grow. Token counts are phonemes (~18-20 per second of speech at speed 1).

    first_tokens / first_max_tokens: the first chunk ends at the first clause boundary
        between `first_min_tokens` (see rtf) and `first_max_tokens`; without one, at the
        phrase or word boundary nearest `first_tokens` (or that minimum, if larger).
    min_tokens: no cut at a comma or phrase boundary leaves a chunk shorter than this.
    floor_tokens: no budget is smaller, however little audio is buffered: a tiny chunk
        costs more compute per second of audio than it buys (with a per-chunk overhead, the
        floor rises to where a chunk clearly adds to the buffer: `least_tokens`).
    sentence_tokens: cap for the second chunk (the rest of the first sentence, or one sentence).
    max_tokens: cap for every later chunk (several whole sentences when they fit).
    rtf / overhead_s: a chunk of `a` seconds of audio costs `overhead_s + rtf * a` seconds of
        compute, as the worker measures it (for all the casts it serves at once). Below rtf 1,
        the next chunk costs at most `margin * buffered`, `buffered` being the audio planned so
        far minus the compute time it took, simulated from the first chunk on; and the first
        chunk is at least what buys the smallest second chunk (`least_tokens`) that much
        buffer (within `first_max_tokens`). At 1 or above the listener will wait anyway, and
        the buffer bound is dropped in favour of fewer, longer chunks.
    max_chunk_s: no chunk after the first holds more than this many seconds of audio (but
        `floor_tokens`); 0: no cap but the token caps. The worker sets it from its quantum.
    memory_chunk_s: no chunk at all, the first included, holds more than this many seconds
        of audio (but `min_tokens`): what the device memory budget leaves room for
        (`--max-device-memory`, `MemoryBudget.chunk_s`); 0: no cap. `with_rtf` keeps it.
    pad_s / tokens_per_s: the audio length model, `(pad_s + tokens / tokens_per_s) / speed`;
        the defaults slightly underestimate Kokoro-82M's English (loadtest.bench_engine
        prints the fit), so the simulated buffer errs on the short side.
    """

    first_tokens: _Tokens = 30
    first_max_tokens: _Tokens = 40
    min_tokens: _Tokens = 8
    floor_tokens: _Tokens = 24
    sentence_tokens: _Tokens = 120
    max_tokens: _Tokens = 250
    limit_tokens: _Tokens = MODEL_MAX_TOKENS
    rtf: Annotated[float, msgspec.Meta(ge=0)] = 0.7
    overhead_s: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    max_chunk_s: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    memory_chunk_s: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    margin: Annotated[float, msgspec.Meta(gt=0, le=1)] = 0.8
    pad_s: Annotated[float, msgspec.Meta(ge=0)] = 0.2
    tokens_per_s: Annotated[float, msgspec.Meta(gt=0)] = 20.0
    speed: Annotated[float, msgspec.Meta(ge=MIN_SPEED, le=MAX_SPEED)] = 1.0

    def with_rtf(
        self, rtf: float, *, overhead_s: float = 0.0, max_chunk_s: float = 0.0
    ) -> "ChunkPolicy":
        """This policy for a device measured at `rtf` compute seconds per audio second plus
        `overhead_s` per chunk, with chunks capped at `max_chunk_s` of audio (0: no cap)."""
        return msgspec.structs.replace(
            self,
            rtf=max(0.0, float(rtf)),
            overhead_s=max(0.0, float(overhead_s)),
            max_chunk_s=max(0.0, float(max_chunk_s)),
        )

    def with_speed(self, speed: float) -> "ChunkPolicy":
        return msgspec.structs.replace(self, speed=float(speed))

    def with_memory(self, chunk_s: float) -> "ChunkPolicy":
        """This policy with chunks held to `chunk_s` seconds of audio by the device memory
        budget (0: no cap; a tighter cap already set stays)."""
        if chunk_s <= 0 or 0 < self.memory_chunk_s <= chunk_s:
            return self
        return msgspec.structs.replace(self, memory_chunk_s=float(chunk_s))

    def audio_s(self, tokens: int) -> float:
        """Estimated seconds of audio for a chunk of `tokens` phonemes."""
        return (self.pad_s + tokens / self.tokens_per_s) / self.speed

    def tokens(self, audio_s: float) -> int:
        """The most phonemes whose estimated audio fits in `audio_s` seconds."""
        return int((audio_s * self.speed - self.pad_s) * self.tokens_per_s)

    def compute_s(self, tokens: int) -> float:
        """Estimated compute seconds of a chunk of `tokens` phonemes."""
        return self.overhead_s + self.rtf * self.audio_s(tokens)

    @property
    def least_tokens(self) -> int:
        """The smallest budget after the first chunk: `floor_tokens`, or twice the size at
        which the buffer bound stalls, whichever is larger.

        A chunk of `a` seconds adds `a - overhead - rtf * a` to the buffer; budgeted at the
        margin, the buffer stops growing once a chunk is `overhead / (margin * (1 - rtf))`.
        A chunk is cut at a boundary below its budget, so a budget at that size leaves the
        buffer stuck there, the plan a long run of ~1 s chunks that spend their compute on
        the overhead (a cast sharing a 2-core CPU made 3x the chunks); twice that size
        grows it."""
        if not (0 < self.rtf < 1 and self.overhead_s > 0):
            return self.floor_tokens
        stall = self.overhead_s / (self.margin * (1 - self.rtf))
        return min(max(self.tokens(2 * stall) + 1, self.floor_tokens), self.max_tokens)

    @property
    def first_min_tokens(self) -> int:
        """The shortest first chunk: one whose audio covers the smallest second chunk's
        compute with the margin (a shorter one would leave the listener waiting for it)."""
        if not 0 < self.rtf < 1:
            return self.min_tokens
        needed = self.tokens(self.compute_s(self.least_tokens) / self.margin) + 1
        return min(max(needed, self.min_tokens), self.first_max_tokens)

    def budget(self, index: int, buffered_s: float) -> int:
        """Most tokens chunk `index` may hold with `buffered_s` of audio ahead of the listener."""
        if index == 0:
            return min(self.first_max_tokens, self.limit_tokens, self._memory_cap)
        cap = self.sentence_tokens if index == 1 else self.max_tokens
        if 0 < self.rtf < 1:
            seconds = (self.margin * buffered_s - self.overhead_s) / self.rtf
            cap = min(cap, max(self.tokens(seconds), self.least_tokens))
        if self.max_chunk_s > 0:
            # Last: the cap bounds how long a newcomer waits for the device, which a listener
            # who cannot be kept ahead anyway does not outweigh.
            cap = min(cap, max(self.tokens(self.max_chunk_s), self.floor_tokens))
        return min(cap, self.limit_tokens, self._memory_cap)

    @property
    def _memory_cap(self) -> int:
        """The most tokens the device memory budget lets one chunk hold at this speed."""
        if self.memory_chunk_s <= 0:
            return self.limit_tokens
        return max(self.tokens(self.memory_chunk_s), self.min_tokens)

    def estimate(
        self,
        index: int,
        buffered_s: float,
        tokens: int,
        *,
        ends: Sequence[int] = (),
        fill: float = 0.75,
        most: int = 4096,
    ) -> list[int]:
        """The sizes (tokens) of the chunks `tokens` more phonemes are expected to make, from
        chunk `index` on with `buffered_s` buffered. `ends`: where sentences end in them
        (token offsets, ascending; their own end is one). Cut as the chunker cuts: the
        second chunk at the first sentence end within its budget, later ones at the latest
        (none shorter than `min_tokens`), so a rest that fits is one chunk; where no
        sentence end is in reach (and for the first chunk), at `fill` of the budget (a cut
        falls at the best boundary within it, from half of it to all). At most `most`
        chunks: past that, the rest is spread over them. What a lazily planned cast has left
        to plan: its predictions, and a slow device's start hold, which waits for the last
        chunk whole."""
        marks = [e for e in ends if 0 < e < tokens]
        marks.append(tokens)
        sizes: list[int] = []
        at = 0  # tokens in the chunks sized so far
        while at < tokens and len(sizes) < most:
            budget = self.budget(index, buffered_s)
            lo = bisect.bisect_left(marks, at + self.min_tokens)
            hi = bisect.bisect_right(marks, at + budget + 1)  # + 1: as `Chunker.cut` counts
            if index >= 1 and lo < hi:
                size = marks[lo if index == 1 else hi - 1] - at
            else:
                size = min(max(int(budget * fill), 1), tokens - at)
            sizes.append(size)
            buffered_s = self.after(index, buffered_s, size)
            index += 1
            at += size
        if at < tokens:
            extra, spill = divmod(tokens - at, len(sizes))
            sizes = [s + extra + (1 if i < spill else 0) for i, s in enumerate(sizes)]
        return sizes

    def after(self, index: int, buffered_s: float, tokens: int) -> float:
        """Audio buffered once chunk `index` (`tokens` long) is appended, in the simulation."""
        made = self.audio_s(tokens)
        if index == 0:
            return made
        return max(buffered_s - self.compute_s(tokens), 0.0) + made


class Boundary(IntEnum):
    """How good a place to cut the gap after a unit is (higher is better)."""

    TIGHT = -1  # after a word that leans on the next (a determiner, preposition, adjective)
    WORD = 0  # between two words
    PHRASE = 1  # before a verb, preposition, conjunction or determiner (English POS tags)
    COMMA = 2  # a comma, dash or bracket, or a full stop that a lowercase word follows
    CLAUSE = 3  # ; :
    SENTENCE = 4  # . ! ? … before a capital, or the end of a block
    BREAK = 5  # a pause or a change of rate or voice (markup): no chunk of speech spans it


@dataclass(slots=True)
class Unit:
    """A word (or phrase) of source text with its phonemes; both keep trailing spaces."""

    text: str
    phonemes: str
    #: A phrase can start here (the G2P knows: a verb, preposition, conjunction, ...).
    phrase_start: bool = False
    #: This word leans on the next one ("the", "below", "narrow"): a cut right after it is
    #: the last resort.
    binds_next: bool = False
    #: The last unit of a block (paragraph, heading, list item).
    block_end: bool = False
    #: Where its text is in the input as sent, [begin, end) (`_spans.NO_SOURCE`: unknown).
    source: tuple[int, int] = NO_SOURCE
    #: Markup units have no phonemes: a pause (`break`) of this many ms, or a named point
    #: (`mark`).
    pause_ms: int = 0
    mark: str = ""
    #: The speed factor its text is read at (`prosody rate`): chunks never mix two.
    rate: float = 1.0
    #: The voice it is read with (a spec; "": the plan's own): chunks never mix two.
    voice: str = ""
    #: The language code of the G2P that read it ("": the plan's own).
    lang: str = ""


_CLOSERS: Final = "\"')]}\u201d\u2019\u00bb"
_SENTENCE_END: Final = ".!?\u2026\u3002\uff01\uff1f"
_CLAUSE_END: Final = ";:\uff1b\uff1a"
_COMMA_END: Final = ",\u2014\u2013-)\u3001\uff0c"
#: Abbreviations misaki reads itself (speechd's normaliser expands the rest), and initials.
_NOT_SENTENCE = re.compile(r"(?:Mr|Mrs|Ms|Dr|St|Mt|vs|[A-Z])\.")
_SPACES = re.compile(r" {2,}")


def _boundary(unit: Unit, following: Unit | None, end: Boundary = Boundary.SENTENCE) -> Boundary:
    """The boundary after `unit`; `end` when nothing follows it (yet)."""
    if unit.block_end:
        return Boundary.SENTENCE
    if following is None:
        return end
    text = unit.text.rstrip()
    bare = text.rstrip(_CLOSERS)
    last = bare[-1:] or text[-1:]
    nxt = following.text.lstrip(_CLOSERS + "\"'(\u201c\u2018\u00ab")[:1]
    if last in _SENTENCE_END:
        if _NOT_SENTENCE.fullmatch(bare.rsplit(" ", 1)[-1]):
            return Boundary.WORD
        return Boundary.COMMA if nxt.islower() else Boundary.SENTENCE
    if last in _CLAUSE_END:
        return Boundary.CLAUSE
    if last in _COMMA_END or text[-1:] in _COMMA_END:
        return Boundary.COMMA
    if unit.binds_next:
        return Boundary.TIGHT
    return Boundary.PHRASE if following.phrase_start else Boundary.WORD


def _hard_boundary(window: Sequence[Unit]) -> int | None:
    """The units before the first hard boundary in `window` (a pause after speech, or a
    unit read at another rate or with another voice than the first spoken one); None:
    there is none."""
    reading: tuple[float, str] | None = None
    for i, unit in enumerate(window):
        if unit.phonemes.strip():
            if reading is None:
                reading = (unit.rate, unit.voice)
            elif (unit.rate, unit.voice) != reading:
                return i
        elif unit.pause_ms and reading is not None:
            return i
    return None


def _pause_run(window: Sequence[Unit]) -> tuple[int, int] | None:
    """The silent chunk the window starts with, as (units it takes, its ms): the marks and
    stray symbols before its first pause, then whole pauses up to `SILENCE_CHUNK_MS` (one at
    least); None when the window does not start with a pause before any speech."""
    at = 0
    while at < len(window) and not window[at].phonemes.strip() and not window[at].pause_ms:
        at += 1
    if at == len(window) or not window[at].pause_ms or window[at].phonemes.strip():
        return None
    ms = 0
    while at < len(window):
        unit = window[at]
        if not unit.pause_ms or unit.phonemes.strip():
            break
        if ms and ms + unit.pause_ms > SILENCE_CHUNK_MS:
            break
        ms += unit.pause_ms
        at += 1
    return at, ms


def _voice_after(window: Sequence[Unit], at: int) -> bool | None:
    """Whether speech follows the units before `at` at once (the next unit that is speech
    or a pause is speech); None: the window does not tell yet."""
    for unit in window[at:]:
        if unit.phonemes.strip():
            return True
        if unit.pause_ms:
            return False
    return None


def _join(units: Iterable[Unit]) -> tuple[str, str, tuple[Span, ...]]:
    text = "".join(u.text for u in units).strip()
    phonemes = _SPACES.sub(" ", "".join(u.phonemes for u in units)).strip()
    return text, phonemes, word_spans(units, phonemes)


def _truncate(phonemes: str, limit: int, *, quiet: bool = False) -> str:
    if len(phonemes) <= limit:
        return phonemes
    cut = phonemes.rfind(" ", 0, limit + 1)
    log.log(
        logging.DEBUG if quiet else logging.WARNING,
        "a single word reads as %d phonemes; truncated to %d",
        len(phonemes),
        limit,
    )
    return phonemes[: cut if cut > 0 else limit].rstrip()


def _cut_first(costs: list[int], marks: list[Boundary], policy: ChunkPolicy, budget: int) -> int:
    """Units in the first chunk: the earliest clause end past `first_min_tokens`, else the
    phrase (then word) boundary nearest `first_tokens` (or that minimum, if larger)."""
    fits = [i for i, c in enumerate(costs) if c <= budget] or [0]
    least = policy.first_min_tokens
    for i in fits:
        if marks[i] >= Boundary.COMMA and costs[i] >= least:
            return i + 1
    aim = max(policy.first_tokens, least)
    roomy = aim + aim // 2
    near = [i for i in fits if least <= costs[i] <= roomy]
    choices = (
        [i for i in near if marks[i] >= Boundary.PHRASE]
        or [i for i in fits if marks[i] >= Boundary.WORD]
        or fits
    )
    return min(choices, key=lambda i: abs(costs[i] - aim)) + 1


def _cut_sentence(costs: list[int], marks: list[Boundary], policy: ChunkPolicy, budget: int) -> int:
    """Units in the second chunk: up to the first sentence end that fits (the rest of the
    sentence the first chunk began, or one sentence); failing that, as for later chunks."""
    for i, cost in enumerate(costs):
        if cost > budget:
            break
        if marks[i] >= Boundary.SENTENCE and cost >= policy.min_tokens:
            return i + 1
    return _cut_fill(costs, marks, policy, budget)


def _cut_fill(costs: list[int], marks: list[Boundary], policy: ChunkPolicy, budget: int) -> int:
    """Units in a later chunk: the latest sentence end within `budget`; failing that, the
    latest clause or comma (one that fills half the budget first), a short sentence, or a
    phrase boundary; failing that, the last word that fits (not one leaning on the next)."""
    fits = [i for i, c in enumerate(costs) if c <= budget]
    if not fits:
        return 1
    half = max(budget // 2, policy.min_tokens)
    for level, floor in (
        (Boundary.SENTENCE, policy.min_tokens),
        (Boundary.CLAUSE, half),
        (Boundary.COMMA, half),
        (Boundary.CLAUSE, policy.min_tokens),
        (Boundary.COMMA, policy.min_tokens),
        (Boundary.SENTENCE, 0),  # a short whole sentence beats a cut inside a clause
        (Boundary.PHRASE, half),
        (Boundary.PHRASE, policy.min_tokens),
    ):
        best = [i for i in fits if marks[i] >= level and costs[i] >= floor]
        if best:
            return best[-1] + 1
    words = [i for i in fits if marks[i] >= Boundary.WORD]
    return (words or fits)[-1] + 1


#: Units without phonemes that may ride along with the chunk before them (a run of stray
#: symbols is not pulled in whole: the ones past this start the next chunk).
_RIDE_ALONG = 64


class Chunker:
    """Units in, chunks out, a unit at a time: `push` units, then ask `cut` for a chunk.

    `index` and `buffered_s` are the whole of its state between chunks besides the units not
    yet in one (a chunker built with a plan's values continues that plan).
    """

    def __init__(self, policy: ChunkPolicy, index: int = 0, buffered_s: float = 0.0) -> None:
        self.policy = policy
        self.index = index
        self.buffered_s = buffered_s
        #: Units pushed and not yet in a chunk.
        self.window: list[Unit] = []
        self.window_tokens = 0
        #: Units taken into chunks (or dropped in a chunk without phonemes), in all.
        self.taken = 0
        self._truncated = False

    def push(self, unit: Unit) -> None:
        self.window.append(unit)
        self.window_tokens += len(unit.phonemes)

    def sentence_ends(self) -> list[int]:
        """Where sentences end in the window: the tokens up to each unit a sentence ends
        after (the last unit's by its punctuation: what follows it is not known yet)."""
        ends: list[int] = []
        total = 0
        window = self.window
        for i, unit in enumerate(window):
            total += len(unit.phonemes)
            if i + 1 < len(window):
                mark = _boundary(unit, window[i + 1])
            else:
                last = unit.text.rstrip().rstrip(_CLOSERS)[-1:]
                mark = Boundary.SENTENCE if unit.block_end or last in _SENTENCE_END else None
            if mark is Boundary.SENTENCE:
                ends.append(total)
        return ends

    @property
    def budget(self) -> int:
        """Most tokens the next chunk may hold."""
        return self.policy.budget(self.index, self.buffered_s)

    def cut(self, end: Boundary | None = None) -> Chunk | None:
        """The next chunk, or None when more units must be pushed first.

        end None: more units will come, so the last one pushed is no place to cut yet; a
        Boundary: none will come for now (SENTENCE: none at all), and the gap after the last
        unit is that good a place to cut.
        """
        while self.window:
            window = self.window
            run = _pause_run(window)
            if run is not None:  # a pause before any speech in the window: a silent chunk
                taken, ms = run
                voice = _voice_after(window, taken)
                if voice is None and end is None:
                    return None  # what comes next decides whether speech follows it at once
                return self._silent(taken, ms, voice=bool(voice))
            budget = self.budget
            hard = _hard_boundary(window)
            if hard is None and end is None and (
                self.window_tokens <= budget + 1 or len(window) < 2
            ):
                return None
            # One more unit than fits, so the boundary after the last candidate is known; a
            # hard boundary (a pause, a change of rate) ends the candidates as the text's end.
            region, region_end = (window, end) if hard is None else (window[:hard], Boundary.BREAK)
            costs: list[int] = []
            marks: list[Boundary] = []
            total = 0
            for i, unit in enumerate(region):
                total += len(unit.phonemes)
                following = region[i + 1] if i + 1 < len(region) else None
                if following is None and region_end is None:
                    break
                costs.append(total - (1 if unit.phonemes.endswith(" ") else 0))
                marks.append(_boundary(unit, following, region_end or Boundary.SENTENCE))
                if costs[-1] > budget:
                    break
            policy = self.policy
            cutter = (
                _cut_first if self.index == 0 else _cut_sentence if self.index == 1 else _cut_fill
            )
            cut = cutter(costs, marks, policy, budget)
            # Units without phonemes (a stray symbol, a mark) ride along with the chunk before
            # them; a pause does not: it is silence of its own.
            riders = 0
            while (
                cut < len(window)
                and riders < _RIDE_ALONG
                and not window[cut].phonemes.strip()
                and not window[cut].pause_ms
            ):
                cut += 1
                riders += 1
            if cut >= len(window) and end is None and riders < _RIDE_ALONG:
                return None  # the next unit decides whether one more rides along
            following = window[cut] if cut < len(window) else None
            taken = window[:cut]
            del window[:cut]
            self.window_tokens -= sum(len(u.phonemes) for u in taken)
            self.taken += len(taken)
            text, phonemes, words = _join(taken)
            if not phonemes:  # only stray symbols: nothing to say
                continue
            truncated = _truncate(phonemes, policy.limit_tokens, quiet=self._truncated)
            self._truncated |= truncated != phonemes  # said once per plan, not per chunk
            phonemes = truncated
            first = next((u for u in taken if u.phonemes.strip()), None)
            rate = first.rate if first is not None else 1.0
            pause_ms = following.pause_ms if following is not None else 0
            chunk = Chunk(
                index=self.index,
                text=text,
                phonemes=phonemes,
                words=words,
                rate=rate,
                pause_ms=pause_ms,
                voice=first.voice if first is not None else "",
                lang=first.lang if first is not None else "",
            )
            self.buffered_s = policy.after(self.index, self.buffered_s, len(phonemes))
            self.index += 1
            return chunk
        return None

    def _silent(self, taken: int, ms: int, *, voice: bool) -> Chunk:
        """The window's first `taken` units as a silent chunk of `ms` (see `Chunk`): `lead_ms`
        when speech follows it at once (`voice`), else `pause_ms`; its marks are its words,
        at its start."""
        units = self.window[:taken]
        del self.window[:taken]
        self.taken += taken
        marks = tuple(Span("", 0, 0, u.source, u.mark) for u in units if u.mark)
        return Chunk(
            index=self.index,
            text="",
            phonemes="",
            words=marks,
            pause_ms=0 if voice else ms,
            lead_ms=ms if voice else 0,
        )


def iter_chunks(units: Iterable[Unit], policy: ChunkPolicy) -> Iterator[Chunk]:
    """Group units into chunks, lazily: each chunk is yielded as soon as it is decided."""
    chunker = Chunker(policy)
    for unit in units:
        chunker.push(unit)
        while (chunk := chunker.cut()) is not None:
            yield chunk
    while (chunk := chunker.cut(Boundary.SENTENCE)) is not None:
        yield chunk
