"""A simulated clock and a cost model for driving scheduling policies (tests only).

Each cast arrives at a time with a list of chunks (audio seconds, generation seconds). The
simulation admits, chooses and "synthesizes" exactly as the worker loop does, with a real-time
listener per cast that starts at the cast's first audio and stalls when a chunk is late. A
`background` cast (a book's chapter) waits in a line of its own, is admitted as the worker's
admission admits one (no listener's cast waiting, one at a time) and planned within the
quantum; nobody listens to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from speechd.worker import ChunkTimes
from speechd.worker._batching import ALONE, BatchCosts, fill_batch
from speechd.worker._policy import ActiveCast, Candidate, Idle, Policy, Run, Sleep

UNITS_PER_S = 10  # phonemes per second of audio in the simulated chunks


@dataclass
class SimCast:
    id: str
    arrival: float
    total_audio: float
    chunks: list[float] = field(default_factory=list)  # audio s per chunk, planned on admission
    plan_rtf: float | None = None
    next: int = 0
    audio: float = 0.0
    first_audio: float | None = None
    deliveries: list[tuple[float, float, float]] = field(default_factory=list)  # t, offset, dur
    background: bool = False

    def ttfa(self) -> float:
        assert self.first_audio is not None
        return self.first_audio - self.arrival

    def gaps(self) -> list[float]:
        """Stalls a real-time listener starting at the first audio would hear."""
        gaps = []
        shift = 0.0
        start = self.deliveries[0][0]
        for t, offset, _ in self.deliveries:
            need = start + offset + shift
            if t > need + 1e-9:
                gaps.append(t - need)
                shift += t - need
        return gaps


def plan(audio_s: float, rtf: float, max_chunk_s: float = 16.0) -> list[float]:
    """Progressive chunking as the engine plans it (audio seconds per chunk): a short first
    chunk, a sentence next, then up to `max_chunk_s` (~16 s: 250 tokens); while rtf < 1 each
    chunk holds at most 0.8 * buffered / rtf, the buffer simulated from the first chunk on."""
    chunks: list[float] = []
    buffered = 0.0
    left = audio_s
    while left > 1e-9:
        if not chunks:
            cap = 1.5
        else:
            cap = min(7.8 if len(chunks) == 1 else 16.0, max_chunk_s)
            if 0 < rtf < 1:
                cap = min(cap, max(0.8 * buffered / rtf, 0.8))
        part = min(cap, left)
        buffered = part if not chunks else max(buffered - rtf * part, 0.0) + part
        chunks.append(part)
        left -= part
    return chunks


def simulate(
    policy: Policy,
    casts: list[SimCast],
    *,
    rtf: float,
    overhead: float = 0.1,
    max_chunk_s: float = 16.0,
    max_active: int | None = None,
    batch: BatchCosts = ALONE,
    curve: dict[int, float] | None = None,
    quantum_s: float = 2.5,
    batches: list[int] | None = None,
    warm_up: Sequence[float] = (),
    steps: list[tuple[float, str]] | None = None,
) -> float:
    """Run `casts` through `policy` on a device making audio at `rtf` plus `overhead` per
    chunk; return the time the last one finished. With `batch` (what the worker measured)
    the step is a batch as the worker fills it (`fill_batch`), which the device makes in
    n * `curve`(n) times its longest item's cost (`curve`: `batch`'s own per-item figures
    by default); `batches` collects the size of every step. `warm_up`: the audio seconds
    of the chunks the worker makes and measures before its first cast (`Worker.warm_up`
    makes a short text's chunks, up to 5 s); none by default: the costs start at the priors.
    `steps` collects each chunk made: (when it started, its cast)."""
    from harness.engines import curve_factor

    device = curve if curve is not None else dict(batch.per_item)
    times = ChunkTimes(prior_rtf=rtf)
    for audio in warm_up:
        units, gen = round(audio * UNITS_PER_S), overhead + rtf * audio
        times.observe(units=units, chars=0, speed=1.0, gen_s=gen, audio_s=audio)
    t = 0.0
    waiting = sorted(casts, key=lambda c: c.arrival)
    active: list[SimCast] = []
    order = {c.id: n for n, c in enumerate(waiting)}

    def view(c: SimCast) -> ActiveCast:
        chunks = []
        for audio in c.chunks[c.next :]:
            predicted = times.audio_s(round(audio * UNITS_PER_S), 1.0)
            chunks.append((predicted, times.gen_s(predicted)))
        return ActiveCast(c.id, order[c.id], c.first_audio, c.audio, tuple(chunks), c.background)

    spare = [c for c in waiting if c.background]
    waiting = [c for c in waiting if not c.background]
    while waiting or active or spare:
        starved = False
        while waiting and waiting[0].arrival <= t:
            listening = [c for c in active if not c.background]
            if max_active is not None and len(listening) >= max_active:
                break
            head = waiting[0]
            views = [view(c) for c in active]
            candidate = Candidate(head.id, head.total_audio)
            if not policy.admit(t, views, candidate, rtf=times.rtf, together=batch.together):
                starved = True
                break
            head.plan_rtf = times.rtf * policy.share(t, views, candidate)
            head.chunks = plan(head.total_audio, head.plan_rtf, max_chunk_s)
            active.append(waiting.pop(0))
        idle_line = not (waiting and waiting[0].arrival <= t)
        if idle_line and spare and spare[0].arrival <= t and not any(c.background for c in active):
            book = spare.pop(0)  # planned within the quantum, for the device alone
            book.plan_rtf = times.rtf
            within = max((quantum_s - overhead) / rtf, 0.5)
            book.chunks = plan(book.total_audio, book.plan_rtf, min(max_chunk_s, within))
            active.append(book)
        decision = policy.choose(t, [view(c) for c in active], starved=starved)
        arrivals = [c.arrival for c in (*waiting[:1], *spare[:1]) if c.arrival > t]
        next_arrival = min(arrivals) if arrivals else None
        if isinstance(decision, Run):
            ids = [decision.cast_id]
            if batch.limit > 1:
                views = [view(c) for c in active]
                ids = fill_batch(
                    t, views, decision.cast_id, batch, quantum_s=quantum_s, comfortable_lead_s=30.0
                )
            members = [next(c for c in active if c.id == i) for i in ids]
            alone = [overhead + rtf * c.chunks[c.next] for c in members]
            took = (
                alone[0]
                if len(ids) == 1
                else len(ids) * curve_factor(device, len(ids)) * max(alone)
            )
            if steps is not None:
                steps.extend((t, c.id) for c in members)
            t += took
            if batches is not None:
                batches.append(len(ids))
            for cast, gen in zip(members, alone, strict=True):
                audio = cast.chunks[cast.next]
                times.observe(
                    units=round(audio * UNITS_PER_S), chars=0, speed=1.0, gen_s=gen, audio_s=audio
                )
                if cast.first_audio is None:
                    cast.first_audio = t
                cast.deliveries.append((t, cast.audio, audio))
                cast.audio += audio
                cast.next += 1
                if cast.next == len(cast.chunks):
                    active.remove(cast)
        elif isinstance(decision, Sleep):
            t += (
                decision.seconds
                if next_arrival is None
                else min(decision.seconds, next_arrival - t)
            )
        else:
            assert isinstance(decision, Idle)
            if next_arrival is None:
                assert not waiting and not spare, "idle with casts that never get in"
                break
            t = next_arrival
    return t
