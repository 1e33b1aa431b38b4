"""The scheduling policies, driven with simulated clocks and costs (no I/O, no engine)."""

from __future__ import annotations

import pytest

from speechd.worker import ChunkTimes, plan_timing
from speechd.worker._policy import (
    ActiveCast,
    Candidate,
    DeadlinePolicy,
    FifoPolicy,
    Idle,
    Run,
    Sleep,
    make_policy,
)

from ._sim import SimCast, simulate


def cast(
    cid: str,
    *,
    order: int = 0,
    first: float | None = 0.0,
    audio: float = 0.0,
    gen: float = 1.0,
    next_audio: float = 2.0,
    left: float = 30.0,
    rtf: float = 0.5,
    size: float = 4.0,
) -> ActiveCast:
    """A cast whose next chunk makes `next_audio` in `gen`; then `size` chunks at `rtf` up to
    `left` seconds of audio in all."""
    chunks = [(next_audio, gen)]
    rest = left - next_audio
    while rest > 1e-9:
        part = min(size, rest)
        chunks.append((part, rtf * part))
        rest -= part
    return ActiveCast(cid, order, first, audio, tuple(chunks))


# -- choosing the next chunk ------------------------------------------------------------


def test_nothing_active_is_idle() -> None:
    assert DeadlinePolicy().choose(0.0, []) == Idle()
    assert FifoPolicy().choose(0.0, []) == Idle()


def test_a_newcomer_goes_before_everyone_listening() -> None:
    listening = cast("old", order=0, first=0.0, audio=5.0)  # lead 3 s at t=2, chunks of 1 s
    newcomer = cast("new", order=1, first=None)
    assert DeadlinePolicy().choose(2.0, [listening, newcomer]) == Run("new")


def test_newcomers_are_served_in_line_order() -> None:
    first, second = cast("a", order=5, first=None), cast("b", order=3, first=None)
    assert DeadlinePolicy().choose(0.0, [first, second]) == Run("b")


def test_the_listener_closest_to_running_dry_goes_next() -> None:
    # At t=10: a leads by 2 s, b by 6 s.
    a = cast("a", order=0, first=0.0, audio=12.0)
    b = cast("b", order=1, first=4.0, audio=12.0)
    assert DeadlinePolicy().choose(10.0, [a, b]) == Run("a")


def test_the_earliest_deadline_goes_first_even_with_a_long_chunk() -> None:
    # a runs dry at 12 (its chunk takes 3 s), b at 13 (0.5 s): a then b meets both deadlines,
    # while b first (least slack) would make a late.
    a = cast("a", order=1, first=0.0, audio=12.0, gen=3.0)
    b = cast("b", order=0, first=0.0, audio=13.0, gen=0.5)
    assert DeadlinePolicy().choose(9.0, [b, a]) == Run("a")


def test_a_newcomer_waits_for_a_listener_it_would_make_run_dry() -> None:
    # At t=10 the listener leads by 0.8 s and its next chunk takes 0.5 s: a newcomer's first
    # chunk (0.4 s) now would make it late; after it, the newcomer comes next.
    listening = cast("old", order=0, first=0.0, audio=10.8, gen=0.5)
    newcomer = cast("new", order=1, first=None, gen=0.4)
    assert DeadlinePolicy().choose(10.0, [listening, newcomer]) == Run("old")
    ahead = cast("old", order=0, first=0.0, audio=11.0, gen=0.5)
    assert DeadlinePolicy().choose(10.0, [ahead, newcomer]) == Run("new")


def test_sleeps_when_everyone_is_comfortably_ahead() -> None:
    policy = DeadlinePolicy(comfortable_lead_s=8.0, max_sleep_s=1.0)
    ahead = [cast("a", audio=20.0, gen=1.0), cast("b", audio=30.0, gen=1.0)]
    # a's slack is 20 - 2 - 1 = 17 s at t=2: 9 s to spare, capped at 1 s.
    assert policy.choose(2.0, ahead) == Sleep(1.0)
    # 0.5 s of spare slack: sleep just that.
    assert policy.choose(10.5, ahead) == Sleep(pytest.approx(0.5))


def test_does_not_sleep_when_one_cast_is_behind_or_a_job_waits_for_room() -> None:
    policy = DeadlinePolicy(comfortable_lead_s=8.0)
    casts = [cast("a", audio=20.0), cast("b", order=1, audio=5.0)]
    assert policy.choose(2.0, casts) == Run("b")
    ahead = [cast("a", audio=20.0), cast("b", order=1, audio=25.0)]
    assert policy.choose(2.0, ahead, starved=True) == Run("a")


def test_a_listener_the_device_cannot_keep_up_with_is_never_slept() -> None:
    """Its start is held back an hour (its lead), and the chunks it is shown fit in that many
    times over; but they take longer to make than to play, so the deficit grows past them:
    the worker goes on (it slept through the hold after the first chunk)."""
    policy = DeadlinePolicy(comfortable_lead_s=8.0)
    held = cast("a", first=3600.0, audio=2.0, gen=3.0, next_audio=2.0, rtf=1.3, left=400.0)
    assert policy.choose(2.0, [held]) == Run("a")
    # As far ahead on a device that keeps up: it sleeps.
    fast = cast("a", first=3600.0, audio=2.0, gen=1.0, next_audio=2.0, rtf=0.5, left=400.0)
    assert policy.choose(2.0, [fast]) == Sleep(1.0)
    assert policy.choose(2.0, [fast, held]) == Run("a")


def test_fifo_finishes_the_oldest_cast_first() -> None:
    casts = [cast("new", order=2, first=None), cast("old", order=1, first=0.0, audio=1.0)]
    assert FifoPolicy().choose(50.0, casts) == Run("old")


# -- admission -----------------------------------------------------------------------------


def test_the_first_cast_is_always_admitted() -> None:
    assert DeadlinePolicy().admit(0.0, [], Candidate("a", 1000.0), rtf=5.0)


def test_a_newcomer_waits_for_the_first_audio_of_the_one_before() -> None:
    fresh = cast("a", first=None, gen=0.1, left=20.0, rtf=0.05)
    assert not DeadlinePolicy().admit(0.0, [fresh], Candidate("b", 10.0), rtf=0.05)


def test_a_listener_with_a_lead_makes_room_for_a_short_cast() -> None:
    policy = DeadlinePolicy()
    # rtf 0.7: one real-time listener fits, with a little to spare. At t=10 this one leads by
    # 2 s with 20 s to go: no room for a 6 s cast yet.
    behind = cast("a", first=0.0, audio=12.0, gen=1.4, left=20.0, rtf=0.7)
    assert not policy.admit(10.0, [behind], Candidate("b", 6.0), rtf=0.7)
    # Leading by 9 s, the 6 s cast fits: it is made while the buffer plays.
    ahead = cast("a", first=0.0, audio=19.0, gen=1.4, left=20.0, rtf=0.7)
    assert policy.admit(10.0, [ahead], Candidate("b", 6.0), rtf=0.7)


def test_a_big_chunk_coming_due_keeps_a_newcomer_out() -> None:
    # Leading by 9 s, but its chunks are 8 s of audio taking 5.6 s each: the second is due
    # at 9 + 8 = 17 s, and with a 6 s cast squeezed in (5.25 s with the margin) it is not
    # made in time.
    big = cast("a", first=0.0, audio=19.0, gen=5.6, next_audio=8.0, left=24.0, rtf=0.7, size=8)
    assert not DeadlinePolicy().admit(10.0, [big], Candidate("b", 6.0), rtf=0.7)


def test_a_listener_running_dry_blocks_admission() -> None:
    dry = cast("a", first=0.0, audio=5.0, left=10.0)  # lead -1 s at t=6
    assert not DeadlinePolicy().admit(6.0, [dry], Candidate("b", 1.0), rtf=0.01)


def test_a_fast_device_admits_many_listeners() -> None:
    def listener(n: int) -> ActiveCast:  # 5 s ahead, 4 s chunks at rtf 0.05 (0.2 s each)
        return cast(str(n), order=n, audio=5.0, gen=0.2, next_audio=4.0, left=60.0, rtf=0.05)

    ten = [listener(n) for n in range(10)]
    assert DeadlinePolicy().admit(0.0, ten, Candidate("x", 60.0), rtf=0.05)
    twenty = [listener(n) for n in range(20)]
    assert not DeadlinePolicy().admit(0.0, twenty, Candidate("x", 60.0), rtf=0.05)


def test_a_newcomer_is_planned_for_the_share_of_the_device_it_gets() -> None:
    policy = DeadlinePolicy()
    newcomer = Candidate("b", 10.0)
    assert policy.share(0.0, [], newcomer) == 1.0
    # A listener 30 s ahead needs nothing during the newcomer's 10 s: the device is its own.
    far_ahead = cast("a", first=0.0, audio=30.0, left=20.0)
    assert policy.share(0.0, [far_ahead], newcomer) == 1.0
    # One that needs audio all through those 10 s shares the device: twice the cost.
    close = cast("a", first=0.0, audio=0.0, left=20.0)
    assert policy.share(0.0, [close], newcomer) == pytest.approx(2.0)
    assert FifoPolicy().share(0.0, [close], newcomer) == 1.0


def test_plan_timing_scales_the_measured_costs_and_caps_chunks_at_the_quantum() -> None:
    times = ChunkTimes()
    for audio in (1.0, 2.0, 4.0, 8.0):  # 0.3 s per call + 0.5 s per audio second
        times.observe(units=10, chars=10, speed=1.0, gen_s=0.3 + 0.5 * audio, audio_s=audio)
    timing = plan_timing(times, share=2.0, quantum_s=2.3)
    assert timing.rtf == pytest.approx(1.0) and timing.overhead_s == pytest.approx(0.6)
    assert timing.max_chunk_s == pytest.approx(4.0)  # 0.3 + 0.5 * 4 = 2.3 s alone
    assert plan_timing(times).max_chunk_s == 0.0  # no quantum, no cap
    assert plan_timing(times, quantum_s=0.1).max_chunk_s > 0  # below the overhead: the floor


def test_fifo_admits_one_cast_at_a_time() -> None:
    assert FifoPolicy().admit(0.0, [], Candidate("a", 1.0), rtf=1.0)
    assert not FifoPolicy().admit(0.0, [cast("a")], Candidate("b", 1.0), rtf=0.01)


def test_make_policy_by_name() -> None:
    assert isinstance(make_policy("deadline", comfortable_lead_s=3.0), DeadlinePolicy)
    assert isinstance(make_policy("fifo"), FifoPolicy)
    with pytest.raises(ValueError, match="unknown scheduling policy"):
        make_policy("lottery")


# -- chunk-time prediction ---------------------------------------------------------------


def test_chunk_times_start_from_priors() -> None:
    times = ChunkTimes(prior_rtf=0.5, prior_audio_per_unit=0.1, prior_audio_per_char=0.05)
    assert times.rtf == 0.5
    assert times.audio_s(20, 1.0) == pytest.approx(2.0)
    assert times.audio_s(20, 2.0) == pytest.approx(1.0)
    assert times.audio_for_chars(100, 1.0) == pytest.approx(5.0)
    assert times.gen_s(4.0) == pytest.approx(2.0)


def test_chunk_times_learn_overhead_and_slope_by_length() -> None:
    times = ChunkTimes()
    for audio in (1.0, 2.0, 4.0, 8.0):  # 0.3 s per call + 0.5 s per audio second
        times.observe(
            units=int(audio * 12),
            chars=int(audio * 15),
            speed=1.0,
            gen_s=0.3 + 0.5 * audio,
            audio_s=audio,
        )
    assert times.gen_s(1.0) == pytest.approx(0.8)
    assert times.gen_s(10.0) == pytest.approx(5.3)
    assert times.line == pytest.approx((0.3, 0.5))  # short chunks pay the overhead
    assert times.audio_within(2.3) == pytest.approx(4.0)
    assert times.rtf == pytest.approx((4 * 0.3 + 0.5 * 15) / 15)
    assert times.audio_s(24, 1.0) == pytest.approx(2.0)
    assert times.audio_for_chars(30, 2.0) == pytest.approx(1.0)


def test_chunk_times_learn_the_pad_of_a_chunks_audio() -> None:
    # Kokoro's audio: a fixed pad plus a rate per phoneme. Priced at the mean rate of a
    # window of short chunks, a long chunk would come out much longer than it is.
    times = ChunkTimes()
    for units in (10, 12, 30, 45, 240):
        audio = 0.25 + units / 18
        times.observe(units=units, chars=units, speed=1.0, gen_s=0.4 + 1.3 * audio, audio_s=audio)
    assert times.audio_s(240, 1.0) == pytest.approx(0.25 + 240 / 18)
    assert times.audio_s(10, 2.0) == pytest.approx((0.25 + 10 / 18) / 2)


def test_chunk_times_forget_old_measurements() -> None:
    times = ChunkTimes(window=4)
    for _ in range(4):
        times.observe(units=10, chars=10, speed=1.0, gen_s=5.0, audio_s=1.0)
    for _ in range(4):
        times.observe(units=10, chars=10, speed=1.0, gen_s=0.1, audio_s=1.0)
    assert times.rtf == pytest.approx(0.1)


# -- whole runs on a simulated clock ------------------------------------------------------


def staggered() -> list[SimCast]:
    """A long cast, then short and long ones arriving while it plays."""
    plan = [(0.0, 60.0), (10.0, 6.0), (25.0, 8.0), (45.0, 30.0), (70.0, 5.0), (80.0, 10.0)]
    return [SimCast(f"c{n}", arrival, audio) for n, (arrival, audio) in enumerate(plan)]


def test_deadline_beats_fifo_on_a_slow_device_at_moderate_load() -> None:
    # A 2-core CPU (rtf 0.6, 0.1 s per call) with chunks of at most 5 s of audio.
    run = {"rtf": 0.6, "overhead": 0.1, "max_chunk_s": 5.0}
    deadline, fifo = staggered(), staggered()
    simulate(DeadlinePolicy(), deadline, **run)
    simulate(FifoPolicy(), fifo, **run)
    assert all(c.gaps() == [] for c in deadline)
    longest = max(0.1 + 0.6 * a for c in deadline for a in c.chunks)
    assert max(c.ttfa() for c in deadline) <= 2 * longest
    # FIFO makes the short casts wait for the long one.
    assert max(c.ttfa() for c in fifo) > 5 * max(c.ttfa() for c in deadline)


def test_a_newcomer_waits_rather_than_make_a_listener_stutter() -> None:
    # Chunks up to 16 s (10 s of compute here): a short cast arriving while the long one
    # needs its next big chunk waits until the long one can spare the time.
    deadline = staggered()
    simulate(DeadlinePolicy(), deadline, rtf=0.6)
    assert all(c.gaps() == [] for c in deadline)
    assert deadline[1].ttfa() > 5.0


def test_a_fast_device_serves_many_listeners_at_once() -> None:
    # A GPU-like device (rtf 0.02, 50 ms per call): ten listeners arriving 0.5 s apart.
    casts = [SimCast(f"c{n}", 0.5 * n, 60.0) for n in range(10)]
    fifo = [SimCast(f"c{n}", 0.5 * n, 60.0) for n in range(10)]
    simulate(DeadlinePolicy(), casts, rtf=0.02, overhead=0.05)
    simulate(FifoPolicy(), fifo, rtf=0.02, overhead=0.05)
    assert all(c.gaps() == [] for c in casts)
    assert max(c.ttfa() for c in casts) < 0.5
    assert max(c.ttfa() for c in fifo) > 5


def test_admission_keeps_listeners_smooth_when_demand_exceeds_capacity() -> None:
    rtf = 0.7  # one real-time listener and a bit
    casts = [SimCast(f"c{n}", 0.0, 30.0) for n in range(4)]
    simulate(DeadlinePolicy(), casts, rtf=rtf)
    assert all(c.gaps() == [] for c in casts)
    # Without admission, all four start at once and all stutter.
    everyone = [SimCast(f"c{n}", 0.0, 30.0) for n in range(4)]
    simulate(_AdmitAll(), everyone, rtf=rtf)
    assert sum(1 for c in everyone if c.gaps()) >= 3


class _AdmitAll(DeadlinePolicy):
    def admit(self, now, casts, candidate, *, rtf, together=None):  # type: ignore[no-untyped-def]
        return True


def test_sleeping_when_ahead_keeps_room_for_a_newcomer() -> None:
    # A 60 s cast alone builds its lead up to the comfortable lead, then paces itself.
    long = SimCast("long", 0.0, 60.0)
    end = simulate(DeadlinePolicy(comfortable_lead_s=8.0), [long], rtf=0.3)
    assert end > 40.0  # paced near real time, not raced to the end in 19 s
    assert long.gaps() == []
