"""First audio and the start hold, casts one after another on a simulated clock (`_slowsim`:
the worker's lazy planning, costs and hold, no I/O): a device faster than real time holds
nobody and nobody stalls, short casts in a row and a long one alike, and once its casts have
shown that they start slow, no cast's slow start holds its listener; a device slower than
real time holds each listener back just enough that nobody stalls."""

from __future__ import annotations

import pytest

from speechd.worker._hold import MIN_HOLD_S
from speechd.worker._policy import DeadlinePolicy

from ._slowsim import SlowCast, simulate

SHORT = 2  # sentences: a two-sentence paragraph, as the peers benchmark sends
LONG = 40  # sentences: about 3 minutes of audio


def in_a_row(
    *, rtf: float, overhead: float, first_cost: float = 1.0, hold: bool = True
) -> list[SlowCast]:
    """Three short casts, each arriving long after the one before it ended, then a long one
    (`hold`: listeners start where the worker says, else at their first audio)."""
    casts = [SlowCast(f"short{n}", 300.0 * n, SHORT) for n in range(3)]
    casts.append(SlowCast("long", 900.0, LONG))
    simulate(
        DeadlinePolicy(),
        casts,
        rtf=rtf,
        overhead=overhead,
        hold=hold,
        min_hold_s=MIN_HOLD_S,
        replan=False,
        first_cost=first_cost,
    )
    return casts


@pytest.mark.parametrize(("rtf", "overhead"), [(0.5, 0.1), (0.5, 0.25), (0.45, 0.2)])
def test_a_device_twice_real_time_holds_nobody_and_nobody_stalls(
    rtf: float, overhead: float
) -> None:
    casts = in_a_row(rtf=rtf, overhead=overhead)
    assert [c.hold for c in casts] == [0.0] * len(casts)
    assert [c.gaps() for c in casts] == [[] for _ in casts]
    # Its first audio is its first chunk's compute: a clause, not a sentence.
    assert all(c.first_play() < 1.5 for c in casts)


@pytest.mark.parametrize(("rtf", "overhead"), [(1.1, 0.2), (1.3, 0.3), (2.0, 0.3)])
def test_a_device_slower_than_real_time_holds_each_listener_so_none_stalls(
    rtf: float, overhead: float
) -> None:
    casts = in_a_row(rtf=rtf, overhead=overhead)
    assert all(c.hold > 0 for c in casts)
    assert [c.gaps() for c in casts] == [[] for _ in casts]
    # Without the hold, each of them would have stalled.
    unheld = in_a_row(rtf=rtf, overhead=overhead, hold=False)
    assert all(c.gaps() for c in unheld)


@pytest.mark.parametrize(("rtf", "overhead", "first_cost"), [(0.5, 0.1, 1.5), (0.5, 0.25, 1.3)])
def test_a_fast_device_whose_casts_start_slow_holds_nobody_once_two_casts_showed_it(
    rtf: float, overhead: float, first_cost: float
) -> None:
    # Each cast's first chunk costs more than its price (a cast's start on a CPU shared with
    # the api that took its request): priced into the rest of the cast, that one chunk's slip
    # held listeners who would not have stalled (0.1-1.7 s here, on every cast).
    unheld = in_a_row(rtf=rtf, overhead=overhead, first_cost=first_cost, hold=False)
    assert [c.gaps() for c in unheld] == [[] for _ in unheld]  # no hold is needed
    casts = in_a_row(rtf=rtf, overhead=overhead, first_cost=first_cost)
    assert [c.gaps() for c in casts] == [[] for _ in casts]
    assert casts[0].hold > 0  # the device has not shown yet that its casts start slow
    assert [c.hold for c in casts[2:]] == [0.0] * (len(casts) - 2)
    assert all(c.first_play() < 2.0 for c in casts[2:])


def test_a_slow_device_whose_casts_start_slow_still_holds_so_none_stalls() -> None:
    casts = in_a_row(rtf=1.1, overhead=0.2, first_cost=1.3)
    assert all(c.hold > 0 for c in casts)
    assert [c.gaps() for c in casts] == [[] for _ in casts]
