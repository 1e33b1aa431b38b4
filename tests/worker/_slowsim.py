"""A simulated worker that plans lazily, for driving the policy on slow and fast devices
(tests only; pure, no I/O, no engine).

Unlike `_sim` (whole plans made on admission), each cast here holds a real `Chunker` over
synthetic units and plans one chunk ahead, as the worker does once the incremental planner
drives it: the policy sees the next chunk plus an estimate of the rest (`rest_chunks`), and the
quantum for each chunk is decided when that chunk is planned (`protects`, `chunk_quantum`).
The device makes `tokens / TOKENS_PER_S + PAD_S` seconds of audio per chunk in
`overhead + rtf * audio` seconds. A listener per cast starts playing at its first audio, or
(`hold`) at the start the worker works out for it (`hold_s`), and stalls when a chunk is late.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from speechd.text import ChunkPolicy
from speechd.text._chunks import Boundary, Chunk, Chunker, Unit, iter_chunks
from speechd.worker import QUANTUM_S, ChunkTimes, plan_timing
from speechd.worker._costs import chunk_quantum
from speechd.worker._hold import hold_s
from speechd.worker._policy import ActiveCast, Candidate, Idle, Policy, Run, Sleep

TOKENS_PER_S = 17.0  # Kokoro's English, roughly (the planner's model says 20: it errs short)
PAD_S = 0.25
SENTENCE = "The old keeper climbed the spiral stairs at dusk, and looked out to the grey sea."

#: One chunk per 510-token span: the engine's own speed (the raw loop, whole-chunk serving).
WHOLE = ChunkPolicy(
    first_tokens=510,
    first_max_tokens=510,
    min_tokens=510,
    sentence_tokens=510,
    max_tokens=510,
    rtf=0,
)


def units(sentences: int) -> list[Unit]:
    """A unit per word of `sentences` sentences; its letters (and punctuation) are phonemes."""
    out = []
    for word in " ".join([SENTENCE] * sentences).split():
        letters = "".join(c for c in word.lower() if c.isalpha())
        tail = word[-1] if word[-1] in ",." else ""
        out.append(Unit(word + " ", letters + tail + " ", phrase_start=word in ("and", "to")))
    out[-1].block_end = True
    return out


def audio_of(tokens: int) -> float:
    return PAD_S + tokens / TOKENS_PER_S


def raw_compute(sentences: int, *, rtf: float, overhead: float) -> tuple[float, float]:
    """(audio, compute) of the text made back to back in the longest chunks the model takes."""
    audio = [audio_of(c.tokens) for c in iter_chunks(units(sentences), WHOLE)]
    return sum(audio), sum(overhead + rtf * a for a in audio)


@dataclass
class SlowCast:
    id: str
    arrival: float
    sentences: int
    chunker: Chunker | None = None
    next: Chunk | None = None
    done: bool = False
    audio: float = 0.0
    first_audio: float | None = None
    origin: float | None = None  # when its listener starts playing
    hold: float = 0.0
    share: float = 1.0
    admitted: float | None = None
    deliveries: list[tuple[float, float]] = field(default_factory=list)  # (time, offset)
    chunks: list[tuple[float, float, float]] = field(default_factory=list)  # t, audio, gen
    caps: list[tuple[float, float]] = field(default_factory=list)  # (t planned, quantum)

    def gaps(self) -> list[float]:
        """Stalls its listener hears, playing from `origin` (its first audio at the earliest)."""
        assert self.origin is not None
        gaps, shift = [], 0.0
        for t, offset in self.deliveries:
            need = self.origin + offset + shift
            if t > need + 1e-9:
                gaps.append(t - need)
                shift += t - need
        return gaps

    def first_play(self) -> float:
        """Seconds from its arrival to its listener's first sound."""
        assert self.origin is not None
        return self.origin - self.arrival


@dataclass
class Run_:
    end: float
    busy: float  # device seconds spent computing
    max_active: int


def simulate(
    policy: Policy,
    casts: list[SlowCast],
    *,
    rtf: float,
    overhead: float,
    quantum_s: float = QUANTUM_S,
    hold: bool = True,
    base: ChunkPolicy | None = None,
    cost: Callable[[float], float] | None = None,
    warm_up: Sequence[int] = (30, 60, 120, 240),
    min_hold_s: float = 0.0,
    warm_cost: Callable[[float], float] | None = None,
    cold_s: float = 0.0,
    replan: bool = True,
    first_cost: float = 1.0,
) -> Run_:
    """Run `casts` through `policy` on a simulated device; the listeners' playback is kept in
    each cast. `hold`: listeners start where the worker says (else at their first audio), a
    hold shorter than `min_hold_s` not stated (as the worker states none under `MIN_HOLD_S`).
    `cost`: the device's compute per chunk of that much audio (else `overhead + rtf * audio`);
    `warm_up`: the chunks (tokens) it measures before the first cast, at `warm_cost` (else
    `cost`: a device that slows down after its warm-up is one whose estimate lags); the first
    chunk the device makes after it costs `cold_s` more, and each cast's first chunk
    `first_cost` times its price (a cast's start paying for more than its chunk). `replan`:
    every chunk is planned for the costs measured then; else, as the worker plans, for those
    measured when the cast was admitted, and again only when its quantum changes
    (`Admission.retime`)."""
    base = base or ChunkPolicy()
    times = ChunkTimes(prior_rtf=rtf)

    def compute(audio: float) -> float:
        return cost(audio) if cost is not None else overhead + rtf * audio

    for tokens in warm_up:  # the warm-up: the cost line measured first
        a = audio_of(tokens)
        gen = warm_cost(a) if warm_cost is not None else compute(a)
        times.observe(units=tokens, chars=tokens, speed=1.0, gen_s=gen, audio_s=a)
    t = busy = 0.0
    waiting = sorted(casts, key=lambda c: c.arrival)
    order = {c.id: n for n, c in enumerate(waiting)}
    active: list[SlowCast] = []
    most = 0

    def view(c: SlowCast) -> ActiveCast:
        assert c.chunker is not None and c.next is not None
        audio = times.audio_s(c.next.tokens, 1.0)
        chunker = c.chunker
        sizes = chunker.policy.estimate(
            chunker.index, chunker.buffered_s, chunker.window_tokens, ends=chunker.sentence_ends()
        )
        chunks = [(audio, times.gen_s(audio))]
        for tokens in sizes:
            estimated = times.audio_s(tokens, 1.0)
            chunks.append((estimated, times.gen_s(estimated)))
        return ActiveCast(c.id, order[c.id], c.origin, c.audio, tuple(chunks))

    def candidate() -> Candidate | None:
        head = next((c for c in waiting if c.arrival <= t), None)
        if head is None:
            return None
        return Candidate(head.id, times.audio_for_chars(len(SENTENCE) * head.sentences, 1.0))

    def plan_next(c: SlowCast) -> None:
        assert c.chunker is not None
        others = [view(o) for o in active if o is not c and o.next is not None]
        protected = bool(others) or policy.protects(
            t, others + ([view(c)] if c.next is not None else []), c.id, candidate(), rtf=times.rtf
        )
        quantum = chunk_quantum(times, quantum_s=quantum_s, protects=protected, share=c.share)
        if replan or not c.caps or c.caps[-1][1] != quantum:
            c.chunker.policy = plan_timing(times, share=c.share, quantum_s=quantum).apply(base)
        c.caps.append((t, quantum))
        c.next = c.chunker.cut() or c.chunker.cut(Boundary.SENTENCE)

    while waiting or active:
        starved = False
        while waiting and waiting[0].arrival <= t:
            head = waiting[0]
            views = [view(c) for c in active]
            wanted = Candidate(head.id, times.audio_for_chars(len(SENTENCE) * head.sentences, 1.0))
            if not policy.admit(t, views, wanted, rtf=times.rtf):
                starved = True
                break
            head.share = policy.share(t, views, wanted)
            waiting.pop(0)
            head.admitted = t
            head.chunker = Chunker(base)
            for unit in units(head.sentences):
                head.chunker.push(unit)
            active.append(head)
            plan_next(head)
        most = max(most, len(active))
        decision = policy.choose(t, [view(c) for c in active], starved=starved)
        arrival = waiting[0].arrival if waiting and waiting[0].arrival > t else None
        if isinstance(decision, Run):
            cast = next(c for c in active if c.id == decision.cast_id)
            assert cast.next is not None and cast.chunker is not None
            audio = audio_of(cast.next.tokens)
            gen = compute(audio) * (first_cost if cast.first_audio is None else 1.0)
            gen += cold_s if busy == 0 else 0.0
            t += gen
            busy += gen
            times.observe(
                units=cast.next.tokens,
                chars=len(cast.next.text),
                speed=1.0,
                gen_s=gen,
                audio_s=audio,
                starts=cast.first_audio is None,
            )
            cast.deliveries.append((t, cast.audio))
            cast.chunks.append((t, audio, gen))
            cast.audio += audio
            first = cast.first_audio is None
            if first:
                cast.first_audio = t
            plan_next(cast)
            if cast.next is None:
                active.remove(cast)
            if first:
                learned, times = times, times.at_start()  # the hold's costs, as `_update`'s
                rest = view(cast).chunks if cast.next is not None else ()
                times = learned
                rest = tuple((a, cast.share * g) for a, g in rest)
                held = hold_s(t, cast.audio, rest) if hold else 0.0
                cast.hold = held if held >= min_hold_s else 0.0
                cast.origin = t + cast.hold
        elif isinstance(decision, Sleep):
            t += decision.seconds if arrival is None else min(decision.seconds, arrival - t)
        else:
            assert isinstance(decision, Idle)
            if arrival is None:
                assert not waiting, "idle with casts that never get in"
                break
            t = arrival
    return Run_(t, busy, most)
