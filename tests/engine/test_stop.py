"""Stopping a synthesis in flight (`Stop`, `Preempted`) on both runtimes, with the tiny model:
a stopped call raises Preempted and nothing else, and leaves the engine as it was: the next
call, stopped or not, gives the audio it gives on an engine never stopped."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from speechd.engine import Engine, Preempted, Stop
from speechd.text import Chunk

TEXT = "A listener arrived, so the book's chunk gives way and is made again later."


class StopAt(Stop):
    """Sets itself at its `at`-th checkpoint: a stop that lands mid-call, on cue."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at, self.checks = at, 0

    def check(self) -> None:
        self.checks += 1
        if self.checks == self.at:
            self.set()
        super().check()


def chunk_of(engine: Engine) -> Chunk:
    return engine.plan(TEXT, "af_heart")[0]


def test_a_stop_set_before_the_call_ends_it_and_spares_the_next(engine: Engine) -> None:
    chunk = chunk_of(engine)
    before = engine.synthesize(chunk, "af_heart", 1.0, seed=7).pcm
    stop = Stop()
    stop.set()
    with pytest.raises(Preempted):
        engine.synthesize(chunk, "af_heart", 1.0, seed=7, stop=stop)
    after = engine.synthesize(chunk, "af_heart", 1.0, seed=7, stop=Stop()).pcm
    np.testing.assert_array_equal(after, before)


def test_a_stop_set_after_the_call_changes_nothing(engine: Engine) -> None:
    chunk = chunk_of(engine)
    stop = Stop()
    first = engine.synthesize(chunk, "af_heart", 1.0, seed=3, stop=stop).pcm
    stop.set()  # too late for that call, and no business of the next one's
    again = engine.synthesize(chunk, "af_heart", 1.0, seed=3).pcm
    np.testing.assert_array_equal(again, first)


def test_torch_stops_between_modules_mid_call(tiny_engine: Engine) -> None:
    chunk = chunk_of(tiny_engine)
    whole = tiny_engine.synthesize(chunk, "af_heart", 1.0, seed=5).pcm
    counting = StopAt(at=-1)  # never sets itself: how many checkpoints one call passes
    tiny_engine.synthesize(chunk, "af_heart", 1.0, seed=5, stop=counting)
    assert counting.checks > 20  # every module of the model is one
    stop = StopAt(at=counting.checks // 2)
    with pytest.raises(Preempted):
        tiny_engine.synthesize(chunk, "af_heart", 1.0, seed=5, stop=stop)
    assert stop.checks == counting.checks // 2  # nothing ran past the stop
    np.testing.assert_array_equal(tiny_engine.synthesize(chunk, "af_heart", 1.0, seed=5).pcm, whole)


def test_onnx_runtime_is_stopped_from_another_thread(tiny_onnx_engine: Engine) -> None:
    """`RunOptions.terminate`, set by the other thread while a run is in flight (a long
    chunk, stopped as soon as it starts), ends it; the flag is cleared for the next run."""
    engine = tiny_onnx_engine
    long_text = " ".join([TEXT] * 6)
    chunk = max(engine.plan(long_text, "af_heart"), key=lambda c: len(c.phonemes))
    whole = engine.synthesize(chunk, "af_heart", 1.0, seed=9).pcm
    for _ in range(20):  # a run that ends before the other thread sets the flag is tried again
        stop = Stop()
        started = threading.Event()
        runtime = engine._runtime  # the moment the run starts is the runtime's to tell
        infer = runtime.infer

        def announced(*args: object, _infer=infer, _started=started) -> object:  # type: ignore[no-untyped-def]
            _started.set()
            return _infer(*args)

        runtime.infer = announced  # type: ignore[method-assign]
        setter = threading.Thread(target=lambda s=stop, e=started: (e.wait(10), s.set()))
        setter.start()
        try:
            engine.synthesize(chunk, "af_heart", 1.0, seed=9, stop=stop)
        except Preempted:
            break
        finally:
            setter.join()
            runtime.infer = infer  # type: ignore[method-assign]
    else:
        pytest.fail("no run was stopped in 20 tries")
    np.testing.assert_array_equal(engine.synthesize(chunk, "af_heart", 1.0, seed=9).pcm, whole)
