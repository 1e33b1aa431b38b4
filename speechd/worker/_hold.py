"""Holding a listener's start back: when a cast cannot be made in real time, how long its
listener waits before playing so that the rest plays without a stall.

Pure arithmetic over a plan, in the manner of `_policy`: a plan is the chunks still to make, in
order, each `(audio seconds, predicted compute seconds)`. Made back to back from `now`, chunk
`i` lands at `now + G_i` (`G_i`: the compute of chunks 0..i, each times `1 + margin`); a
listener who starts playing at `origin` reaches it at `origin + made + A_i` (`made`: the audio
appended already; `A_i`: the audio of chunks 0..i-1). Nobody stalls iff every chunk lands by
then, so the earliest stall-free origin is

    origin = now + max_i (G_i - made - A_i)

and never earlier than the first audio. The *hold* is that origin minus the moment the first
audio lands: 0 whenever the plan keeps ahead of its listener (what progressive chunking plans
on a device faster than real time, so a fast device's first audio is unchanged), and about
`(rtf - 1) * audio + the last chunk's compute` on a device slower than real time.

Every cast is planned lazily: the worker knows its chunks planned ahead and an estimate of the
rest, the chunks its planner is expected to cut from the text not in a chunk yet
(`Planner.estimate`, `ChunkPolicy.estimate`; `_planning.whole_rest`): its tokens counted from
the units made and the text not read yet, cut at its sentence ends within each budget as the
chunker cuts, each priced by the measured lines (`ChunkTimes`: audio from the phonemes, a pad
plus a rate; compute from the audio, a price per call plus a rate) like any planned chunk.
The last chunk weighs most (its listener waits for all of its compute, and for none of its
audio), so where the rest is cut matters as much as its length. A live cast's rest is the text
received so far.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["HOLD_MARGIN", "MIN_HOLD_S", "earliest_origin", "hold_s", "predicted_hold_s"]

HOLD_MARGIN = 0.05
"""Compute is predicted from a least-squares line over recent chunks; the plan still lands in
time if it takes 5% longer than predicted. Every 1% costs a slow device's listener 1% of the
cast's compute in wait (the errors of many chunks partly cancel, so the margin is small)."""

MIN_HOLD_S = 0.02
"""A shorter hold is not stated (timer noise). A hold that is needed is stated however short:
unstated, it is a stall of about its length a few chunks later (holds under 0.25 s used to be
dropped, and a cast whose plan fell that little behind its listener stalled by as much)."""


def earliest_origin(
    now: float,
    made_s: float,
    chunks: Sequence[tuple[float, float]],
    *,
    margin: float = HOLD_MARGIN,
) -> float:
    """The earliest time a listener may start playing (audio second 0) and hear the cast to its
    end without a stall, with `made_s` of audio appended and `chunks` made back to back from
    `now`. With nothing made yet, never before the first chunk lands."""
    cost = 1.0 + max(margin, 0.0)
    done = now
    ahead = made_s  # audio before the chunk in hand
    origin = -math.inf if made_s > 0 else now + (chunks[0][1] * cost if chunks else 0.0)
    for audio, gen in chunks:
        done += gen * cost
        origin = max(origin, done - ahead)
        ahead += audio
    return origin if math.isfinite(origin) else now


def hold_s(
    first_audio_at: float,
    made_s: float,
    chunks: Sequence[tuple[float, float]],
    *,
    margin: float = HOLD_MARGIN,
) -> float:
    """How long after the first audio landed (at `first_audio_at`, with `made_s` of audio then)
    its listener waits so that the rest, `chunks` made from then on, plays without a stall."""
    return max(earliest_origin(first_audio_at, made_s, chunks, margin=margin) - first_audio_at, 0.0)


def predicted_hold_s(
    chunks: Sequence[tuple[float, float]], *, margin: float = HOLD_MARGIN
) -> float:
    """The hold a cast with no audio yet will need if it gets the device for all of `chunks`:
    the wait after its first audio, 0 when the plan keeps ahead of its listener."""
    if not chunks:
        return 0.0
    first_audio, first_gen = chunks[0]
    landed = first_gen * (1.0 + max(margin, 0.0))
    return hold_s(landed, first_audio, chunks[1:], margin=margin)
