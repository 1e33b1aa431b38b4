"""Devices slower than real time, and chunks past the quantum when nobody waits: the policy,
the start hold and lazily planned casts on a simulated clock (no I/O, no engine)."""

from __future__ import annotations

import pytest

from speechd.worker import QUANTUM_S, ChunkTimes
from speechd.worker._costs import LONE_OVERHEAD, MAX_LIFT, SLOW_LIFT, chunk_quantum
from speechd.worker._hold import earliest_origin, hold_s, predicted_hold_s
from speechd.worker._policy import ActiveCast, Candidate, DeadlinePolicy, FifoPolicy, Run

from ._slowsim import SlowCast, raw_compute, simulate


def times_of(rtf: float, overhead: float) -> ChunkTimes:
    times = ChunkTimes()
    for audio in (1.0, 2.0, 4.0, 8.0):
        times.observe(units=10, chars=10, speed=1.0, gen_s=overhead + rtf * audio, audio_s=audio)
    return times


def uniform(
    n: int, audio: float, *, rtf: float, overhead: float = 0.0
) -> list[tuple[float, float]]:
    return [(audio, overhead + rtf * audio)] * n


def plays_without_a_stall(
    origin: float, made: float, landed: float, chunks: list[tuple[float, float]]
) -> bool:
    """Whether chunks made back to back from `landed`, for a listener starting at `origin`
    with `made` audio appended, all land in time."""
    t, ahead = landed, made
    for audio, gen in chunks:
        t += gen
        if t > origin + ahead + 1e-9:
            return False
        ahead += audio
    return True


# -- the start hold ----------------------------------------------------------------------


def test_no_hold_when_the_plan_keeps_ahead_of_its_listener() -> None:
    # Progressive chunks on a device at rtf 0.3: each is ready before the audio before it ends.
    plan = [(2.0, 0.8), (4.0, 1.4), (8.0, 2.6), (12.0, 3.8)]
    assert predicted_hold_s(plan) == 0.0
    assert hold_s(10.0, 2.0, plan[1:]) == 0.0
    assert predicted_hold_s([]) == 0.0


def test_the_hold_covers_a_plan_slower_than_real_time() -> None:
    # 10 s chunks taking 13 s each, from the first audio on: chunk k lands at 13k and plays at
    # hold + 10k, so the hold is 3 s per chunk still to make.
    rest = uniform(3, 10.0, rtf=1.3)
    assert hold_s(0.0, 10.0, rest, margin=0.0) == pytest.approx(9.0)
    held = hold_s(0.0, 10.0, rest)  # with the margin for predictions that err short
    assert held > 9.0
    assert plays_without_a_stall(held, 10.0, 0.0, [(a, g * 1.05) for a, g in rest])
    assert not plays_without_a_stall(held - 1.0, 10.0, 0.0, [(a, g * 1.05) for a, g in rest])
    # Before the first chunk: the same wait, after a first audio 13 s away.
    whole = uniform(4, 10.0, rtf=1.3)
    assert predicted_hold_s(whole, margin=0.0) == pytest.approx(9.0)


def test_the_earliest_start_for_a_listener_already_behind_or_ahead() -> None:
    # 20 s made, the next 10 s chunk takes 13 s: playing from t=0 it runs dry at 20 but the
    # chunk lands at 13 + now.
    chunks = uniform(1, 10.0, rtf=1.3)
    assert earliest_origin(10.0, 20.0, chunks, margin=0.0) == pytest.approx(3.0)
    assert earliest_origin(0.0, 20.0, chunks, margin=0.0) == pytest.approx(-7.0)
    assert earliest_origin(5.0, 0.0, [], margin=0.0) == 5.0


# -- the quantum, when it protects someone -------------------------------------------------


def lone(audio: float = 0.0, *, first: float | None = 0.0, rtf: float = 0.4) -> ActiveCast:
    return ActiveCast("a", 0, first, audio, tuple(uniform(12, 5.0, rtf=rtf, overhead=0.3)))


def test_the_quantum_protects_other_casts_and_candidates_that_get_in() -> None:
    policy = DeadlinePolicy()
    other = ActiveCast("b", 1, None, 0.0, tuple(uniform(3, 2.0, rtf=0.4)))
    # Nobody else: the chunk grows.
    assert not policy.protects(10.0, [lone(20.0)], "a", None, rtf=0.4)
    # Another cast active: the quantum, as today.
    assert policy.protects(10.0, [lone(20.0), other], "a", None, rtf=0.4)
    # A short cast waiting in line that the lead lets in: the quantum.
    assert policy.protects(10.0, [lone(20.0)], "a", Candidate("b", 6.0), rtf=0.4)
    # FIFO lets nobody in beside a cast: it never protects anyone.
    assert not FifoPolicy().protects(10.0, [lone(20.0)], "a", Candidate("b", 6.0), rtf=0.4)


def test_nobody_is_protected_beside_a_cast_slower_than_real_time() -> None:
    slow = ActiveCast("a", 0, 0.0, 20.0, tuple(uniform(12, 10.0, rtf=1.3, overhead=0.4)))
    waiting = Candidate("b", 6.0)
    assert not DeadlinePolicy().admit(10.0, [slow], waiting, rtf=1.3)
    assert not DeadlinePolicy().protects(10.0, [slow], "a", waiting, rtf=1.3)


def test_a_candidate_let_in_only_after_the_cast_ends_is_not_protected() -> None:
    # rtf 0.7: a listener with no lead to spare and 60 s to go keeps a 60 s cast out to its
    # end, whatever its chunks.
    tight = ActiveCast("a", 0, 0.0, 10.0, tuple(uniform(6, 10.0, rtf=0.7, overhead=0.3)))
    assert not DeadlinePolicy().protects(10.0, [tight], "a", Candidate("b", 60.0), rtf=0.7)


def test_chunk_quantum_grows_past_the_quantum_only_when_nobody_is_protected() -> None:
    fast = times_of(0.4, 0.3)
    assert chunk_quantum(fast, quantum_s=2.5, protects=True) == 2.5
    grown = chunk_quantum(fast, quantum_s=2.5, protects=False)
    assert grown == pytest.approx(0.3 / LONE_OVERHEAD)  # the fixed price is 5% of a chunk
    assert chunk_quantum(times_of(0.4, 0.05), quantum_s=2.5, protects=False) == 2.5
    slow = times_of(1.3, 0.4)
    # SLOW_LIFT quanta, not the token caps: a newcomer wanting audio at once waits that long.
    assert chunk_quantum(slow, quantum_s=2.5, protects=False) == SLOW_LIFT * 2.5
    assert chunk_quantum(slow, quantum_s=2.5, protects=True) == 2.5
    # Shared by two, a 0.6 device cannot keep the cast in real time either.
    shared = chunk_quantum(times_of(0.6, 0.3), quantum_s=2.5, protects=False, share=2.0)
    assert shared == SLOW_LIFT * 2.5
    assert chunk_quantum(fast, quantum_s=0.0, protects=True) == 0.0
    # Just faster than real time with a high price per call: no more than MAX_LIFT quanta.
    pricey = times_of(0.9, 0.7)
    assert chunk_quantum(pricey, quantum_s=2.5, protects=False) == pytest.approx(MAX_LIFT * 2.5)


def test_a_held_listener_is_never_slept_into_a_stall() -> None:
    # Just after its first audio, a listener held back 90 s leads by 92 s, but the device has
    # no time to spare for its last chunks: no sleep.
    plan = uniform(20, 10.0, rtf=1.3, overhead=0.4)
    held = ActiveCast("a", 0, 90.0, 2.0, tuple(plan))
    policy = DeadlinePolicy(comfortable_lead_s=30.0)
    assert policy.choose(0.0, [held]) == Run("a")


def test_a_newcomer_waits_while_its_first_chunk_would_stall_a_held_listener() -> None:
    # A listener held back to play through just in time: its slack (about 1 s) is less than
    # the newcomer's first chunk, though its next chunk alone is far from due.
    plan = uniform(10, 10.0, rtf=1.3, overhead=0.4)
    held = ActiveCast("held", 0, 35.0, 10.0, tuple(plan))
    newcomer = ActiveCast("new", 1, None, 0.0, ((2.0, 3.0), (8.0, 10.8)))
    policy = DeadlinePolicy()
    assert policy.choose(0.0, [held, newcomer]) == Run("held")
    # With more to spare than the newcomer's chunk, the newcomer goes first.
    ahead = ActiveCast("held", 0, 38.0, 10.0, tuple(plan))
    assert policy.choose(0.0, [ahead, newcomer]) == Run("new")


def test_a_listener_that_stalls_anyway_lets_a_newcomer_go_first() -> None:
    # First audio at once on a device slower than real time: the listener runs dry at its
    # next chunk either way, so a newcomer's first chunk costs it no stall it would not hear.
    plan = uniform(10, 10.0, rtf=1.3, overhead=0.4)
    at_once = ActiveCast("at-once", 0, 0.0, 10.0, tuple(plan))
    newcomer = ActiveCast("new", 1, None, 0.0, ((2.0, 3.0),))
    assert DeadlinePolicy().choose(5.0, [at_once, newcomer]) == Run("new")


# -- whole runs, planned lazily ------------------------------------------------------------


class QuantumAlways(DeadlinePolicy):
    """Today's rule before this change: every chunk keeps to the quantum."""

    def protects(self, *args: object, **kwargs: object) -> bool:
        return True


@pytest.mark.parametrize("overhead", [0.4, 0.7])
def test_a_lone_long_cast_on_a_slow_device_runs_at_the_engines_speed(overhead: float) -> None:
    audio, compute = raw_compute(40, rtf=1.3, overhead=overhead)
    raw = audio / compute
    cast = SlowCast("long", 0.0, 40)
    run = simulate(DeadlinePolicy(), [cast], rtf=1.3, overhead=overhead)
    assert cast.audio / run.end >= 0.95 * raw
    longest = max(gen for _, _, gen in cast.chunks)
    assert 2 * QUANTUM_S < longest <= 1.05 * SLOW_LIFT * QUANTUM_S  # past the quantum, bounded
    assert cast.gaps() == []  # held back just long enough
    assert cast.hold > 0
    capped = SlowCast("long", 0.0, 40)
    before = simulate(QuantumAlways(), [capped], rtf=1.3, overhead=overhead)
    assert capped.audio / before.end < 0.9 * raw


def test_casts_beyond_a_slow_device_wait_in_line_and_each_plays_smoothly() -> None:
    casts = [SlowCast(f"c{n}", 0.0, 6) for n in range(4)]
    audio, compute = raw_compute(6, rtf=1.3, overhead=0.4)
    run = simulate(DeadlinePolicy(), casts, rtf=1.3, overhead=0.4)
    assert run.max_active == 1  # one at a time rather than four stuttering together
    assert all(c.gaps() == [] for c in casts)
    assert sum(c.audio for c in casts) / run.end >= 0.95 * audio / compute
    starts = [c.first_play() for c in casts]
    assert starts == sorted(starts)


def test_at_once_listeners_on_a_slow_device_hear_their_first_audio_fast_and_then_wait() -> None:
    held, at_once = SlowCast("a", 0.0, 10), SlowCast("a", 0.0, 10)
    simulate(DeadlinePolicy(), [held], rtf=1.3, overhead=0.4)
    simulate(DeadlinePolicy(), [at_once], rtf=1.3, overhead=0.4, hold=False)
    assert at_once.first_play() < 5.0 < held.first_play()
    assert held.gaps() == [] and sum(at_once.gaps()) > 0


def test_a_fast_device_keeps_its_first_audio_and_holds_nobody() -> None:
    arrivals = [(0.0, 30), (3.0, 2), (6.0, 4), (9.0, 1)]
    now = [SlowCast(f"c{n}", at, s) for n, (at, s) in enumerate(arrivals)]
    before = [SlowCast(f"c{n}", at, s) for n, (at, s) in enumerate(arrivals)]
    simulate(DeadlinePolicy(), now, rtf=0.05, overhead=0.02)
    simulate(QuantumAlways(), before, rtf=0.05, overhead=0.02)
    assert all(c.hold == 0.0 and c.gaps() == [] for c in now)
    for mine, old in zip(now, before, strict=True):
        assert mine.first_play() == pytest.approx(old.first_play(), abs=1e-6)


def test_a_newcomer_brings_the_quantum_back_for_chunks_not_yet_planned() -> None:
    # A 2-core CPU (rtf 0.4, 0.3 s a call), no pacing: alone, the long cast's chunks grow past
    # the quantum; a short cast arrives during one of them, and the chunks planned while it is
    # made keep to the quantum again; alone again, they grow again.
    long, short = SlowCast("long", 0.0, 60), SlowCast("short", 20.0, 2)
    simulate(DeadlinePolicy(comfortable_lead_s=1e9), [long, short], rtf=0.4, overhead=0.3)
    assert max(q for t, q in long.caps if t < 20.0) > QUANTUM_S
    last_short = short.chunks[-1][0]
    during = [q for t, q in long.caps if 20.0 <= t < last_short]
    assert during and all(q == QUANTUM_S for q in during)
    assert max(q for t, q in long.caps if t > last_short) > QUANTUM_S
    assert all(c.gaps() == [] for c in (long, short))
    # Its wait for first audio is the grown chunk in flight, then its own first chunk.
    longest = max(gen for _, _, gen in long.chunks)
    assert short.first_play() <= longest + short.chunks[0][2] + 1e-6
