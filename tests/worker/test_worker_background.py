"""Background work (a book's chapters) in the scheduling policy, driven with simulated clocks and
costs (no I/O, no engine): a background cast gets only the time the listeners' casts would
sleep or idle through, takes nobody's room, and always keeps to the quantum."""

from __future__ import annotations

import pytest

from speechd.worker._policy import (
    COMFORTABLE_LEAD_S,
    ActiveCast,
    Candidate,
    DeadlinePolicy,
    FifoPolicy,
    Idle,
    Run,
    Sleep,
)

from ._sim import SimCast, simulate
from .test_worker_policy import cast


def book(cid: str = "book", *, order: int = 0, first: float | None = None) -> ActiveCast:
    """A background cast: chunks of 2.5 s compute (the quantum) over a long text."""
    return ActiveCast(cid, order, first, 0.0, ((5.0, 2.5),) * 40, background=True)


# -- choosing ---------------------------------------------------------------------------------


def test_a_book_alone_gets_the_device() -> None:
    assert DeadlinePolicy().choose(0.0, [book()]) == Run("book")


def test_the_oldest_book_goes_first() -> None:
    assert DeadlinePolicy().choose(0.0, [book("b", order=7), book("a", order=3)]) == Run("a")


def test_a_newcomer_goes_before_a_book() -> None:
    newcomer = cast("new", order=9, first=None)
    assert DeadlinePolicy().choose(0.0, [book(order=0), newcomer]) == Run("new")


def test_a_listener_that_is_not_comfortably_ahead_goes_before_a_book() -> None:
    listening = cast("old", order=5, first=0.0, audio=20.0)  # 12 s ahead at t=8
    assert DeadlinePolicy().choose(8.0, [book(), listening]) == Run("old")


def test_a_book_takes_the_time_a_listener_would_sleep_through() -> None:
    policy = DeadlinePolicy(comfortable_lead_s=8.0)
    ahead = cast("old", order=5, first=0.0, audio=20.0, gen=1.0)  # slack 17 s at t=2
    assert policy.choose(2.0, [ahead]) == Sleep(1.0)
    assert policy.choose(2.0, [ahead, book()]) == Run("book")


def test_a_book_never_costs_a_listener_a_stall() -> None:
    """A listener the device cannot keep up with is never slept, so the book waits; and
    were the listener to sleep with less slack than a book's chunk, the book waits too."""
    policy = DeadlinePolicy(comfortable_lead_s=1.0)
    held = cast("a", first=3600.0, audio=2.0, gen=3.0, next_audio=2.0, rtf=1.3, left=400.0)
    assert policy.choose(2.0, [held, book()]) == Run("a")
    tight = cast("b", first=0.0, audio=4.0, gen=0.1, next_audio=1.0, left=1.0)  # slack 1.9 s
    assert policy.choose(2.0, [tight]) == Sleep(pytest.approx(0.9))
    assert policy.choose(2.0, [tight, book()]) == Sleep(pytest.approx(0.9))  # 2.5 s > 1.9 s


def test_a_job_waiting_for_room_keeps_the_device_on_the_listeners() -> None:
    policy = DeadlinePolicy(comfortable_lead_s=8.0)
    ahead = cast("old", order=5, first=0.0, audio=20.0, gen=1.0)
    assert policy.choose(2.0, [ahead, book()], starved=True) == Run("old")


def test_fifo_makes_books_after_every_other_cast() -> None:
    casts = [book(order=0), cast("later", order=4, first=None)]
    assert FifoPolicy().choose(0.0, casts) == Run("later")
    assert FifoPolicy().choose(0.0, [book(order=0)]) == Run("book")
    assert FifoPolicy().admit(0.0, [book()], Candidate("x", 10.0), rtf=0.5)
    assert DeadlinePolicy().choose(0.0, []) == Idle()


# -- room, share and the quantum ----------------------------------------------------------


def test_a_book_takes_nobodys_room() -> None:
    policy = DeadlinePolicy()
    newcomer = Candidate("b", 30.0)
    fresh = book(first=None)  # a book with no audio yet would keep any newcomer out
    assert policy.admit(0.0, [fresh], newcomer, rtf=0.7)
    assert policy.share(0.0, [fresh], newcomer) == 1.0
    behind = cast("a", first=0.0, audio=12.0, gen=1.4, left=20.0, rtf=0.7)
    assert policy.admit(10.0, [behind], Candidate("b", 6.0), rtf=0.7) is False
    assert policy.admit(10.0, [behind, fresh], Candidate("b", 6.0), rtf=0.7) is False


def test_a_book_always_keeps_to_the_quantum_and_protects_nobody() -> None:
    policy = DeadlinePolicy()
    alone = [book()]
    assert policy.protects(0.0, alone, "book", None, rtf=0.5)
    listener = cast("a", first=0.0, audio=5.0)
    # A listener beside a book only: nobody waits for its chunks, so they may grow.
    assert not policy.protects(0.0, [listener, book()], "a", None, rtf=0.5)
    assert policy.protects(0.0, [listener, book(), cast("b")], "a", None, rtf=0.5)


# -- a book beside listeners, simulated ------------------------------------------------------


def _run(casts: list[SimCast], steps: list[tuple[float, str]] | None = None) -> float:
    return simulate(DeadlinePolicy(), casts, rtf=0.5, overhead=0.1, steps=steps)


def _lead_at(listener: SimCast, t: float) -> float | None:
    """Seconds of audio the listener (playing from its first audio, waiting at the live edge
    when it catches up) has buffered at `t`; None before its first audio."""
    if listener.first_audio is None or t < listener.first_audio:
        return None
    clock = listener.first_audio
    buffered = 0.0
    for at, _, duration in listener.deliveries:
        if at > t:
            break
        played = min(at - clock, buffered)
        clock, buffered = at, buffered - played + duration
    return buffered - min(t - clock, buffered)


@pytest.mark.parametrize("arrival", [0.0, 3.1, 7.0, 41.3])
def test_a_listener_beside_a_book_hears_what_it_hears_without_it(arrival: float) -> None:
    """The listener's chunks come before the book's: none of the book's starts while the
    listener waits for its first audio or is less than the comfortable lead ahead, the
    listener never stalls, and its first audio comes at most one book chunk (one quantum)
    later than with no book at all, which is the chunk in flight when it arrives."""
    alone = SimCast("listener", arrival, 120.0)
    _run([alone])
    listener = SimCast("listener", arrival, 120.0)
    steps: list[tuple[float, str]] = []
    end = _run([SimCast("book", 0.0, 600.0, background=True), listener], steps)
    assert alone.gaps() == [] and listener.gaps() == []
    assert listener.ttfa() <= alone.ttfa() + 2.5 + 1e-6
    assert listener.deliveries[-1][0] <= alone.deliveries[-1][0] + 2.5 + 1e-6
    book_steps = [t for t, cid in steps if cid == "book"]
    assert len(book_steps) >= 600 / 4.8  # every chunk of it was made
    assert end >= 600 * 0.5
    for t in book_steps:
        if arrival <= t < listener.deliveries[-1][0]:
            lead = _lead_at(listener, t)
            assert lead is not None, f"a book chunk at {t:.2f} s before the listener's first"
            assert lead >= COMFORTABLE_LEAD_S, (t, lead)


def test_listeners_arriving_through_a_book_never_stall() -> None:
    arrivals = [0.5, 2.0, 19.0, 33.5, 90.0, 91.0, 200.0]
    listeners = [SimCast(f"l{n}", at, 20.0 + 7 * n) for n, at in enumerate(arrivals)]
    alone = [SimCast(f"l{n}", at, 20.0 + 7 * n) for n, at in enumerate(arrivals)]
    _run(alone)
    _run([SimCast("book", 0.0, 900.0, background=True), *listeners])
    for with_book, without in zip(listeners, alone, strict=True):
        assert with_book.gaps() == [], with_book.id
        assert with_book.ttfa() <= without.ttfa() + 2.5 + 1e-6, with_book.id


def test_chapters_are_made_one_after_another_in_order() -> None:
    chapters = [SimCast(f"ch{n}", 0.0, 30.0, background=True) for n in range(3)]
    steps: list[tuple[float, str]] = []
    _run(chapters, steps)
    order = [cid for _, cid in steps]
    assert order == sorted(order)  # every chunk of ch0, then ch1's, then ch2's
