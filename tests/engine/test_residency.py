"""Giving the model back and taking it again (`Engine.unload`, `Engine.load`), through the
engine's own API: what it frees is measured from the process (its RSS, in a fresh
interpreter), and what it speaks after a wake is the same audio."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from speechd.engine import Engine, EngineConfig, load_engine
from tests.api._live import ROOT
from tests.support.tiny_model import export_tiny


def _first_chunk(engine: Engine) -> object:
    return engine.plan("The model goes away and comes back.", "af_heart")[0]


@pytest.mark.parametrize("runtime", ["torch", "onnx"])
def test_an_unloaded_engine_plans_and_speaks_the_same_after_its_wake(
    tiny_model_dir: Path, runtime: str
) -> None:
    if runtime == "onnx":
        export_tiny(tiny_model_dir)
    engine = load_engine(EngineConfig(model_dir=str(tiny_model_dir), device="cpu", engine=runtime))
    chunk = _first_chunk(engine)
    before = engine.synthesize(chunk, "af_heart", 1.0, seed=5).pcm  # type: ignore[arg-type]
    assert engine.resident and engine.load() == 0.0  # held: nothing to take
    engine.unload()
    assert not engine.resident
    assert engine.plan("Planning needs no model.", "af_heart")  # G2P and voices stay
    took = engine.load()
    assert engine.resident and took > 0 and engine.load_s == took
    after = engine.synthesize(chunk, "af_heart", 1.0, seed=5).pcm  # type: ignore[arg-type]
    np.testing.assert_array_equal(before, after)
    engine.unload()
    again = engine.synthesize(chunk, "af_heart", 1.0, seed=5).pcm  # type: ignore[arg-type]
    assert engine.resident  # a synthesis takes the model itself when it has to
    np.testing.assert_array_equal(before, again)


# In a fresh interpreter: memory other tests left behind would blur the figures.
_RSS = textwrap.dedent(
    """
    import json, sys
    from speechd.engine import EngineConfig, load_engine
    from speechd.engine._heap import _resident_bytes

    engine = load_engine(EngineConfig(model_dir=sys.argv[1], device="cpu", engine=sys.argv[2]))
    engine.warm_up()
    held = _resident_bytes()
    engine.unload()
    unloaded = _resident_bytes()
    engine.load()
    woken = _resident_bytes()
    engine.unload()
    again = _resident_bytes()
    print(json.dumps({"held": held, "unloaded": unloaded, "woken": woken, "again": again}))
    """
)


def measure_unload(model_dir: Path, runtime: str) -> dict[str, int]:
    """RSS of a fresh worker-like process with the model held, after an unload, after the
    wake, and after a second unload."""
    result = subprocess.run(
        [sys.executable, "-c", _RSS, str(model_dir), runtime],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    figures: dict[str, int] = json.loads(result.stdout.strip().splitlines()[-1])
    return figures


def assert_unload_frees_the_model(figures: dict[str, int], weights: int) -> None:
    """RSS falls by most of the weights' size at each unload, and a wake takes back about
    what the unload gave (no growth from one cycle to the next)."""
    assert figures["held"] - figures["unloaded"] > 0.6 * weights, figures
    assert figures["woken"] - figures["again"] > 0.6 * weights, figures
    assert figures["again"] < figures["unloaded"] + 0.25 * weights, figures


@pytest.mark.slow
def test_unloading_the_tiny_model_frees_most_of_its_weights(tiny_model_dir: Path) -> None:
    weights = (tiny_model_dir / "kokoro-v1_0.pth").stat().st_size
    assert_unload_frees_the_model(measure_unload(tiny_model_dir, "torch"), weights)
