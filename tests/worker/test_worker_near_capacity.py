"""Admission and start holds near capacity, on a cost model shaped like this 2-core CPU (no
I/O, no engine): the costs the worker predicts, and the listeners it admits and holds back
with them, must keep their word when the device is not a straight line, runs slower than
its warm-up measured, or pays for a cold first call.

The device: Kokoro-82M's compute per chunk as `loadtest.bench_engine` measured it on this
box with nothing else running (`loadtest/results/round3/bench_engine_quiet.txt`, 2 threads),
joined from one measured length to the next, and scaled to a real-time factor of 0.6-0.8
(what it runs at while the load generator, the api and neighbours share the two cores).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

import pytest

from harness.engines import CostEngine, chunked_text
from speechd.casts._records import audio_chunk
from speechd.durable import Store
from speechd.worker import ChunkTimes
from speechd.worker._hold import MIN_HOLD_S
from speechd.worker._policy import DeadlinePolicy

from ._helpers import ended_stream, make_worker, playable, running, submit_text
from ._slowsim import SlowCast, audio_of, simulate
from .test_worker_slow_device import heard_silence_ms

#: (audio s, compute s) per chunk, quiet, 2 threads: torch is no straight line (0.70 s per
#: audio second at 1 s, 0.46 from 3 to 12 s, 0.61 at 27 s); ONNX Runtime nearly is.
TORCH = [(1.06, 0.73), (1.75, 0.98), (3.29, 1.51), (7.17, 3.26), (12.58, 5.67), (26.85, 16.29)]
ONNX = [(1.06, 0.66), (1.75, 0.89), (3.29, 1.48), (7.17, 2.90), (12.58, 4.86), (26.85, 10.53)]
WARM_UP = (35, 60, 90, 95)  # the worker's warm-up chunks (tokens), about


def device(points: list[tuple[float, float]], scale: float = 1.0) -> Callable[[float], float]:
    """The compute of a chunk of `a` audio seconds: `points` joined, `scale` times."""
    xs = [x for x, _ in points]

    def compute(audio: float) -> float:
        i = min(max(bisect.bisect_left(xs, audio), 1), len(xs) - 1)
        (x0, y0), (x1, y1) = points[i - 1], points[i]
        return scale * (y0 + (y1 - y0) * (audio - x0) / (x1 - x0))

    return compute


def measured(compute: Callable[[float], float], tokens: tuple[int, ...]) -> ChunkTimes:
    times = ChunkTimes()
    for units in tokens:
        audio = audio_of(units)
        times.observe(units=units, chars=units, speed=1.0, gen_s=compute(audio), audio_s=audio)
    return times


# -- what a chunk is predicted to cost -----------------------------------------------------


def test_each_length_is_priced_at_what_the_device_takes_for_it() -> None:
    # Over short and long chunks alike (a lone cast's chunks grow past the quantum) torch's
    # costs make a line with a negative price per call; the mean rate that stood for it
    # priced a 1 s chunk (a first chunk) 22% low and a 3 s one 10% low.
    torch = device(TORCH)
    times = measured(torch, (16, 30, 55, 120, 210, 450))
    for audio in (1.06, 1.75, 3.29, 7.17, 12.58):
        assert times.gen_s(audio) == pytest.approx(torch(audio), rel=0.06)


def test_a_straight_line_device_is_still_priced_on_its_line() -> None:
    onnx = device(ONNX)
    times = measured(onnx, (16, 30, 55, 120, 210))
    for audio in (1.0, 2.5, 5.0, 10.0, 14.0):
        assert times.gen_s(audio) == pytest.approx(onnx(audio), rel=0.05)
    assert times.gen_s(times.audio_within(3.0)) == pytest.approx(3.0, rel=1e-3)


def test_a_device_slower_than_its_window_is_priced_as_it_runs_now() -> None:
    # Warmed up quiet, then shared: one chunk at 1.3x its prediction prices the next ones so,
    # before the 48-chunk window could show it; and it wears off once chunks run as predicted.
    torch = device(TORCH)
    times = measured(torch, WARM_UP)
    quiet = times.gen_s(5.0)
    slow = device(TORCH, 1.3)
    times.observe(units=35, chars=35, speed=1.0, gen_s=slow(audio_of(35)), audio_s=audio_of(35))
    assert times.gen_s(5.0) >= 1.25 * quiet
    assert times.rtf >= 1.25 * measured(torch, WARM_UP).rtf
    for units in 3 * (35, 60, 90, 95):  # the window catches up, and the slip goes
        audio = audio_of(units)
        times.observe(units=units, chars=units, speed=1.0, gen_s=slow(audio), audio_s=audio)
    assert times.slip < 1.1
    assert times.gen_s(5.0) == pytest.approx(slow(5.0), rel=0.1)


# -- listeners near capacity ----------------------------------------------------------------

#: (device, its slowdown, how much faster its warm-up ran, a cold first call's extra s):
#: real-time factor 0.6-0.8 on the lengths a cast's chunks have.
NEAR = [
    (TORCH, 1.5, 1.3, 0.0),
    (TORCH, 1.7, 1.15, 0.0),
    (TORCH, 1.7, 1.3, 0.5),
    (TORCH, 1.5, 1.3, 1.0),
    (ONNX, 1.7, 1.15, 0.0),
    (ONNX, 1.7, 1.3, 0.5),
]


def run(
    points: list[tuple[float, float]],
    scale: float,
    lag: float,
    cold_s: float,
    *,
    level: int,
    sentences: int,
) -> list[SlowCast]:
    """`level` casts of `sentences` sentences arriving together (the load test's concurrency
    sweep), planned and held as the worker plans and holds them."""
    casts = [SlowCast(f"c{n}", 0.0, sentences) for n in range(level)]
    simulate(
        DeadlinePolicy(),
        casts,
        rtf=0.5,
        overhead=0.3,
        cost=device(points, scale),
        warm_cost=device(points, scale / lag),
        warm_up=WARM_UP,
        min_hold_s=MIN_HOLD_S,
        cold_s=cold_s,
        replan=False,
    )
    return casts


@pytest.mark.parametrize("level", [1, 2, 4])
@pytest.mark.parametrize(("points", "scale", "lag", "cold_s"), NEAR)
def test_no_listener_admitted_near_capacity_stalls(
    points: list[tuple[float, float]], scale: float, lag: float, cold_s: float, level: int
) -> None:
    # Each of these stalled at least one listener at some level (0.02-0.8 s): the second
    # chunk (longer than the first) priced by a warm-up the device no longer keeps to, the
    # hold worked out from it.
    for sentences in (1, 2, 3):
        casts = run(points, scale, lag, cold_s, level=level, sentences=sentences)
        holds = [c.hold for c in casts]
        assert [c.gaps() for c in casts] == [[] for _ in casts], (sentences, holds)


@pytest.mark.parametrize("points", [TORCH, ONNX])
def test_a_device_as_measured_holds_nobody_back_any_longer(
    points: list[tuple[float, float]],
) -> None:
    # Nothing slipped (the device runs as its warm-up measured): the listeners start when
    # they did, and none stalls.
    for level in (1, 2, 4):
        for sentences in (1, 2, 3):
            casts = run(points, 1.0, 1.0, 0.0, level=level, sentences=sentences)
            assert all(c.hold == 0.0 and c.gaps() == [] for c in casts)
            first = casts[0]
            assert first.first_play() < 1.2 * device(points)(audio_of(40)) + 0.1


def test_a_cast_is_planned_on_a_line_with_a_price_per_call() -> None:
    # Torch's costs over every length a lone cast's chunks take: the line the planner budgets
    # a cast's chunks by keeps a price per call and the slope of the lengths a chunk has,
    # where the mean rate (0.54 s per audio second, no price per call) stood for it.
    torch = device(TORCH)
    times = measured(torch, (16, 30, 55, 120, 210, 450))
    overhead, slope = times.line
    assert overhead > 0.1
    for audio in (1.06, 1.75, 3.29, 7.17):
        assert overhead + slope * audio == pytest.approx(torch(audio), rel=0.15)


# -- the worker, on a cost-model engine that slows down after its warm-up ----------------------


async def test_a_worker_whose_device_slowed_since_its_warm_up_holds_for_it(store: Store) -> None:
    # Warmed up at 0.8 s per audio second, the device then runs 1.6x slower (neighbours on
    # the cores): the listener is held back for the device it has now, not the one measured.
    engine = CostEngine(rtf=0.8, overhead_s=0.02, audio_per_char=0.003)
    cid = await submit_text(store, chunked_text(8))
    worker = make_worker(store, engine, policy=DeadlinePolicy())
    await worker.warm_up("af_heart")
    engine.rtf, engine.overhead_s = 1.6 * engine.rtf, 1.6 * engine.overhead_s
    async with running(worker):
        stream = await ended_stream(store, cid)
    assert audio_chunk(playable(stream)[0]).hold_ms > 0
    # Held by the warm-up's figures, it heard most of the silence it would have at once.
    assert heard_silence_ms(stream, held=True) < 0.25 * heard_silence_ms(stream, held=False)


def test_timing_noise_is_no_slip() -> None:
    # A chunk 3% over its prediction (a quiet CPU's noise) prices nothing up: admission, near
    # its margin, would otherwise keep newcomers waiting for the worst recent noise.
    onnx = device(ONNX)
    times = measured(onnx, WARM_UP)
    before = times.gen_s(4.0), times.rtf, times.line
    audio = audio_of(60)
    times.observe(units=60, chars=60, speed=1.0, gen_s=1.03 * times.gen_s(audio), audio_s=audio)
    assert times.slip == 1.0
    assert times.gen_s(4.0) == pytest.approx(before[0], rel=0.02)
