"""The post-step update: what one rendered chunk does to its cast, applied in one place (as
vLLM's scheduler applies a step's output in `update_from_output`).

A chunk that failed is counted (`Attempts.chunk_failed`: a new attempt, or the cast given up).
A chunk made is measured (`ChunkTimes`), cut into records (with the start hold its listeners
are given, on the playable sequence's first audio), appended with the eos after the last
chunk, and moves the cast on: its listeners' clock, its plan, its compute and its resume
point. `apply` returns what became of the cast (`Fate`); the loop drops one that is no longer
its to make.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from speechd.casts.schema import Eos, eos_record

from ._attempts import Attempts, Fate
from ._cast import Admitted
from ._costs import ChunkTimes
from ._hold import MIN_HOLD_S, hold_s
from ._plan import Planned
from ._planning import whole_rest
from ._render import ChunkFailed, Rendered, chunk_records

if TYPE_CHECKING:
    from speechd.telemetry import Telemetry

__all__ = ["Outcomes"]

log = logging.getLogger("speechd.worker")


class Outcomes:
    """Applies rendered chunks to their casts (see the module docstring)."""

    def __init__(
        self,
        attempts: Attempts,
        times: ChunkTimes,
        sample_rate: int,
        *,
        clock: Callable[[], float],
        telemetry: Telemetry | None = None,
    ) -> None:
        self._attempts = attempts
        self._times = times
        self._rate = sample_rate
        self._clock = clock
        self._telemetry = telemetry  # it counts the audio made

    async def apply(
        self, cast: Admitted, planned: Planned, outcome: Rendered | ChunkFailed
    ) -> Fate:
        """Apply one rendered chunk's outcome to its cast (as vLLM's scheduler applies a
        step's output): a failure is counted (`Attempts.chunk_failed`); audio is measured,
        appended (with the eos after the last chunk) and moves the cast's listeners' clock,
        its plan and its resume point on. Returns what became of the cast."""
        chunk = planned.chunk
        if isinstance(outcome, ChunkFailed):
            return await self._attempts.chunk_failed(cast, chunk, outcome)
        rendered, last = outcome, cast.plan.last
        rate = self._rate
        made_s = sum(size for size, _ in rendered.pieces) / rate
        if log.isEnabledFor(logging.DEBUG):  # the prediction it was scheduled on, and the truth
            audio = self._times.audio_s(len(chunk.phonemes), cast.recipe.speed)
            lead = cast.lead(self._clock(), rate)
            log.debug(
                "cast %s chunk %d: %.2f s of audio (predicted %.2f), %.2f s to make (predicted"
                " %.2f), its listener had %s s left",
                cast.id,
                chunk.index,
                made_s,
                audio,
                rendered.gen_s,
                self._times.gen_s(audio),
                "-" if lead is None else f"{lead:.2f}",
            )
        # Measured before it is appended: a cast's first chunk then prices the rest of its plan
        # with its own cost (a worker that has not warmed up has only priors). A chunk made in
        # a batch counts at what it would have cost alone: the batch's saving is the
        # scheduler's to predict (`_batching`), not a cheaper device.
        self._times.observe(
            units=len(chunk.phonemes),
            chars=len(chunk.text),
            speed=cast.recipe.speed,
            gen_s=rendered.gen_s if rendered.alone_s is None else rendered.alone_s,
            audio_s=made_s,
        )
        hold_ms = 0
        if cast.origin_ms == 0:  # the playable sequence's first audio: hold its listeners back?
            held = hold_s(0.0, made_s, self._predicted_rest(cast))
            hold_ms = round(1000 * held) if held >= MIN_HOLD_S else 0
        records, samples, resume = chunk_records(
            cast,
            chunk.text,
            rendered,
            position=planned.position,
            more=cast.plan.more_after(made_s),
            sample_rate=rate,
            hold_ms=hold_ms,
        )
        eos = None
        if last:
            gen_ms = round((cast.gen_s + rendered.gen_s) * 1000)
            eos = Eos(
                chunks=cast.index + len(records), audio_ms=samples * 1000 // rate, gen_ms=gen_ms
            )
            records.append(eos_record(cast.attempt, eos, cast.start_seq))
        appended = await self._attempts.append(cast, records, chunk=chunk)
        if appended.first_ms is None:  # lost, or its records are too large: the chunk failed
            return appended.fate
        if self._telemetry is not None:
            self._telemetry.audio_made((samples - cast.samples) / rate)
        # The hold is stated either way (a smooth listener joining later keeps to it), but the
        # listeners of a cast whose creator wanted its first audio at once play from it.
        held_ms = 0 if cast.job.at_once else hold_ms
        if cast.origin_ms == 0:
            cast.origin_ms = appended.first_ms + held_ms  # the sequence's first audio, held
            if held_ms:
                log.info(
                    "cast %s: its listeners start %.1f s after its first audio",
                    cast.id,
                    hold_ms / 1000,
                )
        cast.landed(self._clock(), samples - cast.samples, rate, hold_s=held_ms / 1000)
        cast.made += len(rendered.pieces)
        cast.gen_s += rendered.gen_s
        cast.plan.take()
        cast.resume = resume or cast.resume
        if eos is not None:
            return await self._attempts.done(cast, eos)
        return Fate.GOES_ON

    def _predicted_rest(self, cast: Admitted) -> list[tuple[float, float]]:
        """(audio, compute) predicted for the chunks the cast has left after the one in hand
        (`whole_rest`: those planned, then the planner's estimate of the rest of its text),
        made with the share of the device its plan was made for, at the device's costs as
        measured now."""
        share = max(cast.timing.share, 1.0)
        return [(audio, share * gen) for audio, gen in whole_rest(cast, self._times)[1:]]
