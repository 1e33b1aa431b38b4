"""A cast's plan as the worker holds it: made lazily, one chunk ahead, a bounded step at a time.

Every cast is planned by the engine's incremental planner (`Engine.planner`, see
`speechd.text.Planner`): the worker calls `CastPlan.step` on the engine thread between chunk
renders (`Worker._plan_ahead`), a bounded slice of work per call, until the cast's next chunk
is known and so is whether another follows it. So a 200,000-character text of any shape is
never planned up front: it costs the other casts one slice per turn, never its whole plan.

A chunk is `ready` to render once the one after it is planned too, or the plan is done (then
it is the last: its encoder output ends the file), or the cast is live and its input open (the
chunk is spoken now, not the last; when the input closes later, the file is ended by a record
of no audio, `Attempts.end_file`).

**Positions.** Each audio record says where its chunk ends in the plan (header `p`): the
planner's `position` after the chunk. A new attempt that keeps earlier chunks builds its
planner from the last kept record's position, fed the same text from its start, and goes on
with exactly the chunks that follow (positions carry the chunk index, so seeds match too).

**Pauses.** A pause (SSML `break`) is a chunk of its own with no phonemes (`pause_s`):
planned, positioned and landed like any chunk, but made without the engine
(`_render.render`), priced at no compute (`_planning.predictions`) and never learned by the
costs (`_update`).

**Live input.** A live cast's text arrives in `input/<id>`; the worker's follower (`_input`)
queues the pieces here (`pending`, `pending_close`) and the loop hands them to the planner
before its next step (the planner is only ever touched between engine calls, on the loop, or
inside one on the engine thread).

**The `n` header** (records planned) cannot be exact before the plan is done: it is this
chunk's records, plus the chunks already planned after it, plus the rest of the text as the
planner estimates it (`audio_left_s`) in chunks the size of this one; at least one more
unless this chunk is known to be the last. So `n == i + 1` holds on the record that ends the
file, and on no other.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import deque
from dataclasses import dataclass, field

from speechd.text import PlanStatus

from ._protocols import ChunkLike, ChunkPolicyLike, EngineLike, PlannerLike

__all__ = [
    "PLANNER",
    "CastPlan",
    "Planned",
    "model_fingerprint",
    "open_plan",
    "pause_s",
    "plan_fingerprint",
]

PLANNER = "incremental/2"
"""How the worker plans and what its positions mean: bump it when either changes (2: a pause
is a chunk of its own, never part of a chunk of speech)."""
SSML_PLANNER = "ssml/2"
"""How an SSML document is planned beyond that (2: `<voice>` and `xml:lang` choose each
chunk's voice and each slice's G2P): bump it when that changes."""


def pause_s(chunk: ChunkLike) -> float | None:
    """The silence a pause's chunk holds, in seconds (within `LEAD_S`, 50 ms:
    `speechd.engine.silence` says to the sample); None for a chunk of speech. A chunk without
    phonemes is a pause (`speechd.text.Chunk.silent`): the worker writes it, never the model."""
    if chunk.phonemes:
        return None
    return (getattr(chunk, "pause_ms", 0) + getattr(chunk, "lead_ms", 0)) / 1000


@dataclass(frozen=True, slots=True)
class Planned:
    """A planned chunk and the plan position after it (its records' `p`)."""

    chunk: ChunkLike
    position: str


@dataclass(eq=False)
class CastPlan:
    """One cast's incremental plan (see the module docstring)."""

    planner: PlannerLike
    fingerprint: str
    live: bool = False
    ahead: deque[Planned] = field(default_factory=deque)
    done: bool = False  # the planner reached DONE
    waiting: bool = False  # its last step asked for input
    input_seq: int = 0  # the input record to read next (a live cast's follower)
    input_last_ms: int = 0  # the last input record's timestamp (0: none read yet)
    pending: list[str] = field(default_factory=list)  # input that came, not yet fed
    pending_close: bool = False  # the input's end came
    last_input_s: float = field(default_factory=time.monotonic)
    flushed_chars: int = -1  # input received (fed) when an idle step last ran
    fed_chars: int = 0
    steps: int = 0
    quantum_s: float | None = None  # the chunk cap its planner was last retimed for (None: none)

    # -- the loop's view ----------------------------------------------------------------

    @property
    def open_input(self) -> bool:
        """A live cast whose input has not closed: no chunk planned so far is the last."""
        return self.live and not self.pending_close and not self.planner.closed

    @property
    def waiting_chars(self) -> int:
        """Characters that came and are in no chunk yet (fed or not)."""
        return self.planner.chars_left + sum(len(piece) for piece in self.pending)

    @property
    def ready(self) -> bool:
        """The next chunk can be rendered: it is planned, and so is whether it is last (it
        is not while the input is open)."""
        if not self.ahead:
            return False
        return len(self.ahead) > 1 or self.done or self.waiting or self.open_input

    @property
    def finished(self) -> bool:
        """Planned to its end and every chunk taken."""
        return self.done and not self.ahead

    @property
    def last(self) -> bool:
        """The next chunk is the plan's last (its output ends the file)."""
        return self.done and len(self.ahead) == 1

    def wants_step(self, now: float, flush_s: float) -> bool:
        """Whether a planning step would do anything now."""
        if self.done or self.ready:
            return False
        if not self.waiting:
            return True
        if self.pending or self.pending_close:
            return True  # input came
        idle = now - self.last_input_s
        return idle >= flush_s and self.flushed_chars < self.fed_chars

    def flush_due(self, now: float, flush_s: float) -> float | None:
        """Seconds until an idle flush would plan what is waiting (None: none to come)."""
        if not self.waiting or self.done or self.flushed_chars >= self.fed_chars:
            return None
        return max(self.last_input_s + flush_s - now, 0.0)

    def take(self) -> Planned:
        return self.ahead.popleft()

    def more_after(self, chunk_audio_s: float) -> int:
        """Chunks estimated to follow the next one, which makes `chunk_audio_s` of audio (see
        the module docstring on `n`): 0 only when it is the last."""
        if self.last:
            return 0
        left = self.planner.audio_left_s
        estimate = math.ceil(left / max(chunk_audio_s, 0.5)) if left > 0 else 0
        return max(len(self.ahead) - 1 + estimate, 1)

    # -- on the loop, between engine calls ----------------------------------------------

    def feed_pending(self) -> None:
        """Hand the planner the input that came since its last step."""
        for piece in self.pending:
            self.planner.feed(piece)
            self.fed_chars += len(piece)
        self.pending.clear()
        if self.pending_close and not self.planner.closed:
            self.planner.close()

    # -- on the engine thread -----------------------------------------------------------

    def step(self, now: float, flush_s: float) -> None:
        """One bounded planning step (raises what the planner raises: a text it cannot
        plan, a position that does not fit it). A live input idle for `flush_s` while the
        planner waits is flushed first: what arrived is planned, an unfinished clause too."""
        if (
            self.waiting
            and now - self.last_input_s >= flush_s
            and self.flushed_chars < self.fed_chars
        ):
            self.planner.flush()
            self.flushed_chars = self.fed_chars
        result = self.planner.step()
        self.steps += 1
        self.waiting = result.status is PlanStatus.INPUT
        if result.status is PlanStatus.CHUNK:
            assert result.chunk is not None
            self.ahead.append(Planned(result.chunk, self.planner.position))
        elif result.status is PlanStatus.DONE:
            self.done = True


def plan_fingerprint(engine: EngineLike, policy: ChunkPolicyLike, *, ssml: bool = False) -> str:
    """What decides a cast's chunks: the planner's version and the exact chunk policy it is
    planned with (timed for the cast and at its speed); for an SSML document, also how it
    is planned (`SSML_PLANNER`) and how the voices its `<voice>` elements name resolve
    (`Engine.voice_version`: a voice map changed between two attempts would read the rest
    with other voices, so the new attempt starts over)."""
    planner = getattr(engine, "plan_version", "")
    text = f"{PLANNER}|{planner}|{policy!r}"
    if ssml:
        text += f"|{SSML_PLANNER}|{getattr(engine, 'voice_version', '')}"
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def model_fingerprint(engine: EngineLike) -> str:
    """The engine's name for the model it speaks with ("" if it gives none)."""
    return str(getattr(engine, "fingerprint", "") or "")


def open_plan(
    engine: EngineLike,
    text: str,
    voice: str,
    policy: ChunkPolicyLike,
    *,
    live: bool = False,
    position: str | None = None,
    ssml: bool = False,
    normalize: bool = True,
) -> CastPlan:
    """A cast's plan, not stepped yet (on the engine thread: the first planner of a language
    builds its G2P). A live cast's text comes later (`pending`); `position` resumes one.
    `ssml` and `normalize` say how the text is read (passed on only where they are not the
    default, so an engine that reads plain text only still plans plain text)."""
    reading: dict[str, bool] = {}
    if ssml:
        reading["ssml"] = True
    if not normalize:
        reading["normalize"] = False
    planner = engine.planner(
        voice, policy, text=text, done=not live, position=position, **reading
    )
    return CastPlan(planner, plan_fingerprint(engine, policy, ssml=ssml), live=live)
