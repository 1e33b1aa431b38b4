"""A step's outcome, as data: what the chunks one step rendered do to their casts, worked out
in one place with no I/O (as vLLM's scheduler turns a step's output into its requests'
updates).

`step_outcome` is pure: no store, no clock, no await, and nothing it is handed changes. From
the casts as they stand and their chunks' results (one chunk, or a batch's) it works out

* per cast, its `Update` (`_cast`): the chunk's records, one per piece the engine thread cut
  it into to fit the store (`_render`), the text on the first and the resume checkpoint `k`
  on the last, then the eos after the cast's last chunk, in the store's own batches; the
  start hold its first record states when it is the playable sequence's first audio; and how
  the cast moves on once they are durable (records, samples, compute, checkpoint, plan). Or
  its chunk's failure (`ChunkFailed`): the engine's, the encoder's, or records over the
  store's limits (then nothing of it is appended, and its encoder may hold part of it);
* what the device's costs learn from the step (`Observation`s, in order): each chunk of
  speech at what it would have cost alone (one made in a batch is priced alone, scaled by the
  batch's measured time over its predicted one: the saving is the scheduler's to predict, not
  a cheaper device), over the audio the model made; never a pause, which the worker writes
  at no device time (learned as audio, one mostly silent chunk once priced the device 12x
  faster than it is for the next 48 chunks).

A start hold prices the rest of its cast at the costs as they stand once the step's chunks up
to its own are learned (`ChunkTimes.after`): a cast's first chunk prices the rest with its own
cost (a worker that has not warmed up has only priors), less the slowness the device's casts
have shown at their start (`ChunkTimes.at_start`).

The step applies the outcome (`Worker._step`): the costs learn, every cast's records go to the
store together, and each cast moves on by its own update (`Attempts.land`, `Admitted.advance`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from speechd.casts import record_words
from speechd.casts.schema import AudioChunk, Eos, audio_record, eos_record
from speechd.durable import AppendRecord, RecordTooLarge

from ._batching import BatchCosts
from ._cast import Admitted, Update
from ._continuation import Resume, resume_header
from ._costs import ChunkTimes, Observation
from ._hold import MIN_HOLD_S, hold_s
from ._plan import Planned, pause_s
from ._planning import whole_rest
from ._render import ChunkFailed, Rendered

__all__ = ["StepOutcome", "step_outcome"]


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """What one step does: per cast, in the step's order, its update or its chunk's failure;
    and what the device's costs learn from it, in order."""

    updates: list[Update | ChunkFailed]
    learned: list[Observation]


def step_outcome(
    casts: Sequence[Admitted],
    results: Sequence[Rendered | ChunkFailed],
    *,
    times: ChunkTimes,
    batch_costs: BatchCosts,
    sample_rate: int,
) -> StepOutcome:
    """The outcome of a step that rendered each cast's next planned chunk (`plan.ahead[0]`)
    with `results` (see the module docstring), at the device's costs (`times`, as measured
    before the step) and what batches cost (`batch_costs`)."""
    results = _alone_costs(casts, results, times, batch_costs)
    updates: list[Update | ChunkFailed] = []
    learned: list[Observation] = []
    for cast, result in zip(casts, results, strict=True):
        if isinstance(result, ChunkFailed):
            updates.append(result)
            continue
        planned = cast.plan.ahead[0]
        audio_s = sum(size for size, _ in result.pieces) / sample_rate  # what its listeners hear
        # What the model made, what its costs are learned over: a pause's silence is none of
        # it (the worker wrote it, at no device time), speech is all of its chunk.
        spoken_s = 0.0 if pause_s(planned.chunk) is not None else audio_s
        if spoken_s > 0:
            learned.append(
                Observation(
                    units=len(planned.chunk.phonemes),
                    chars=len(planned.chunk.text),
                    speed=cast.recipe.speed,
                    gen_s=result.gen_s if result.alone_s is None else result.alone_s,
                    audio_s=spoken_s,
                    starts=cast.origin_ms == 0,
                )
            )
        hold_ms = 0
        if cast.origin_ms == 0:  # the playable sequence's first audio: hold its listeners back?
            hold_ms = _hold_ms(cast, audio_s, times.after(learned).at_start())
        updates.append(_chunk_update(cast, planned, result, audio_s, hold_ms, sample_rate))
    return StepOutcome(updates, learned)


def _hold_ms(cast: Admitted, audio_s: float, times: ChunkTimes) -> int:
    """The start hold (ms) the playable sequence's first chunk, of `audio_s`, states (`_hold`):
    the rest of the cast after it (`whole_rest`: the chunks planned, then the planner's
    estimate of the rest of its text), made with the share of the device its plan was made
    for, at `times`; 0 below `MIN_HOLD_S`."""
    share = max(cast.timing.share, 1.0)
    rest = [(audio, share * gen) for audio, gen in whole_rest(cast, times)[1:]]
    held = hold_s(0.0, audio_s, rest)
    return round(1000 * held) if held >= MIN_HOLD_S else 0


def _chunk_update(
    cast: Admitted,
    planned: Planned,
    rendered: Rendered,
    audio_s: float,
    hold_ms: int,
    sample_rate: int,
) -> Update | ChunkFailed:
    """The update of the cast whose next chunk, `planned`, was `rendered`: its records (with
    the eos after the plan's last chunk) in the store's batches, or the chunk's failure if a
    record is over the store's limits."""
    records, samples, resume = _chunk_records(
        cast,
        planned.chunk.text,
        rendered,
        position=planned.position,
        more=cast.plan.more_after(audio_s),
        sample_rate=sample_rate,
        hold_ms=hold_ms,
    )
    eos = None
    if cast.plan.last:
        gen_ms = round((cast.gen_s + rendered.gen_s) * 1000)
        audio_ms = samples * 1000 // sample_rate
        eos = Eos(
            chunks=cast.index + len(records), audio_ms=audio_ms, gen_ms=gen_ms, samples=samples
        )
        records.append(eos_record(cast.attempt, eos, cast.start_seq))
    try:
        batches = cast.limits.batches(records)  # every record checked first
    except RecordTooLarge as exc:  # fails the chunk like an engine error, with nothing appended
        return ChunkFailed(exc, encoder_intact=False)
    return Update(
        batches=batches,
        planned=planned,
        made=len(rendered.pieces),
        samples=samples - cast.samples,
        gen_s=rendered.gen_s,
        resume=resume,
        hold_ms=hold_ms,
        # The hold is stated either way (a smooth listener joining later keeps to it), but the
        # listeners of a cast whose creator wanted its first audio at once play from it.
        held_ms=0 if cast.job.at_once else hold_ms,
        eos=eos,
    )


def _alone_costs(
    casts: Sequence[Admitted],
    results: Sequence[Rendered | ChunkFailed],
    times: ChunkTimes,
    batch_costs: BatchCosts,
) -> Sequence[Rendered | ChunkFailed]:
    """The chunks made in a batch, each with what it would have cost alone: its predicted
    cost alone, scaled by the batch's measured time over its predicted one."""
    batched = [(n, r) for n, r in enumerate(results) if isinstance(r, Rendered) and r.batched > 1]
    if not batched:
        return results
    alone = []
    for n, _ in batched:
        chunk = casts[n].plan.ahead[0].chunk
        audio = times.audio_s(len(chunk.phonemes), casts[n].recipe.speed)
        alone.append(times.gen_s(audio))
    predicted = batch_costs.batch_s(alone)
    if not (0 < predicted < float("inf")):
        return results
    scale = sum(r.gen_s for _, r in batched) / predicted
    out = list(results)
    for (n, r), cost in zip(batched, alone, strict=True):
        out[n] = dataclasses.replace(r, alone_s=cost * scale)
    return out


def _chunk_records(
    cast: Admitted,
    text: str,
    rendered: Rendered,
    *,
    position: str,
    more: int,
    sample_rate: int,
    hold_ms: int = 0,
) -> tuple[list[AppendRecord], int, Resume | None]:
    """The audio records of the cast's next chunk as rendered (`position`: the plan's after
    it; `more`: the chunks estimated to follow it, 0 for the last), the playable sequence's
    samples after them, and the resume checkpoint the last one carries. Each record carries
    the chunk's words that start in it, timed from its own start; the first carries `hold_ms`
    (the start hold, given for the playable sequence's first chunk only)."""
    samples = cast.samples
    pieces = rendered.pieces
    records = []
    state: Resume | None = None
    for n, (size, body) in enumerate(pieces):
        begin_ms = samples * 1000 // sample_rate
        begin = samples - cast.samples  # where this record starts in the chunk's PCM
        samples += size
        duration_ms = samples * 1000 // sample_rate - begin_ms
        final = n == len(pieces) - 1
        words = record_words(
            rendered.words, begin, begin + size, duration_ms, sample_rate, final=final
        )
        resume = b""
        if n == len(pieces) - 1 and rendered.checkpoint:
            gen_ms = round((cast.gen_s + rendered.gen_s) * 1000)
            state = Resume(samples=samples, gen_ms=gen_ms, encoder=rendered.checkpoint)
            resume = resume_header(state)
        audio = AudioChunk(
            attempt=cast.attempt,
            index=cast.index + n,
            planned=cast.index + len(pieces) + more,
            offset_ms=begin_ms,
            duration_ms=duration_ms,
            text=text if n == 0 else "",
            body=body,
            words=words,
            unit=rendered.unit,
            plan=position,
            start_seq=cast.start_seq,
            resume=resume,
            hold_ms=hold_ms if n == 0 else 0,
        )
        records.append(audio_record(audio))
    return records, samples, state
