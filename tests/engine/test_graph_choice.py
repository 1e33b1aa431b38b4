"""How a CPU worker picks its decoder graph (`--graph auto`, `_graph_choice`): the fastest
graph within its quality bound and `MIN_GAIN` faster than the more exact one, measured on
the probe with the float graph timed first and last, kept per machine so that a restart
takes the same graph (and fingerprint) unmeasured; and what happens when the variants
cannot be built (`_variants`: the float graph, and the worker goes on). Timings come from a
clock each graph advances by its own cost, so no real timing decides a test."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from speechd.engine import _graph_choice, _variants
from speechd.engine._graph_choice import MIN_GAIN, Measured, choose_graph, pick_graph
from speechd.engine._runtime import Inference, Request
from speechd.engine._variants import Variant
from speechd.errors import ModelUnavailable

REQUEST = Request([5, 6, 7], np.zeros((1, 256), np.float32), 1.0, 0)


def _variant_set(tmp_path: Path) -> dict[str, Variant]:
    return {
        "float": Variant("float", tmp_path / "back.onnx", "", 0.0),
        "fused": Variant("fused", tmp_path / "v" / "back.fused.onnx", "f1", 0.05),
        "int8": Variant("int8", tmp_path / "v" / "back.int8.onnx", "i1", 1.7),
    }


class Graphs:
    """A runtime whose graphs each cost what `costs` says (on the test's clock) and whose
    audio is a tone, detuned by `detune` for a graph that computes wrongly."""

    def __init__(self, costs: dict[str, float], detune: dict[str, float] | None = None) -> None:
        self.costs, self.detune = costs, detune or {}
        self.now = 0.0
        self.graph = "float"
        self.used: list[str] = []
        self.durations = {name: np.array([3, 20, 20, 20, 3]) for name in costs}

    def clock(self) -> float:
        return self.now

    def use_graph(self, variant: Variant) -> None:
        self.graph = variant.name
        self.used.append(variant.name)

    def infer(self, tokens: Any, style: Any, speed: float, seed: int | None) -> Inference:
        self.now += self.costs[self.graph]
        samples = int(self.durations[self.graph].sum()) * 600
        t = np.arange(samples) / 24_000
        tone = 0.3 * np.sin(2 * np.pi * 220 * (1 + self.detune.get(self.graph, 0.0)) * t)
        return Inference(tone.astype(np.float32), self.durations[self.graph])


def test_the_fastest_graph_within_its_bound_is_chosen() -> None:
    assert choose_graph({"float": Measured(1.0, 0.0, True)}) == "float"
    measured = {
        "float": Measured(1.0, 0.0, True),
        "fused": Measured(0.9, 0.05, True),
        "int8": Measured(0.5, 1.8, True),
    }
    assert choose_graph(measured) == "int8"
    # int8 slower than the float rewrites (a CPU without 8-bit dot products): fused.
    assert choose_graph({**measured, "int8": Measured(2.0, 1.8, True)}) == "fused"
    # Out of its bound, or timing speech otherwise: never, however fast.
    assert choose_graph({**measured, "int8": Measured(0.2, 2.1, True)}) == "fused"
    assert choose_graph({**measured, "int8": Measured(0.2, 0.1, False)}) == "fused"


def test_a_variant_must_save_min_gain_over_the_more_exact_graph() -> None:
    just_under = 1.0 * (1 - MIN_GAIN) + 0.001
    assert (
        choose_graph({"float": Measured(1.0, 0, True), "fused": Measured(just_under, 0, True)})
        == "float"
    )
    measured = {
        "float": Measured(1.0, 0, True),
        "fused": Measured(0.8, 0, True),
        "int8": Measured(0.78, 1.0, True),  # 2.5% under fused: not worth its rounding
    }
    assert choose_graph(measured) == "fused"


def test_auto_measures_every_graph_and_the_float_one_twice(tmp_path: Path) -> None:
    runtime = Graphs({"float": 1.0, "fused": 0.9, "int8": 0.45})
    variants = _variant_set(tmp_path)
    measured = _graph_choice.measure_graphs(runtime, variants, REQUEST, runtime.clock)
    assert runtime.used == ["float", "fused", "int8", "float"]
    assert measured["int8"].cost_s == pytest.approx(0.45)
    assert all(m.same_durations and m.distance_db < 0.01 for m in measured.values())


def test_a_graph_that_sounds_wrong_on_this_cpu_is_not_chosen(tmp_path: Path) -> None:
    runtime = Graphs({"float": 1.0, "fused": 0.9, "int8": 0.45}, detune={"int8": 0.5})
    store = tmp_path / "v"
    store.mkdir()
    variants = _variant_set(tmp_path)
    chosen = pick_graph(
        runtime, variants, "auto", REQUEST, threads=2, store=store, clock=runtime.clock
    )
    assert chosen == "fused" and runtime.graph == "fused"
    kept = json.loads((store / "choice.json").read_text())
    (entry,) = kept.values()
    assert entry["graph"] == "fused" and entry["distance_db"]["int8"] > 2.0


def test_a_restart_takes_the_graph_kept_for_this_machine_unmeasured(tmp_path: Path) -> None:
    store = tmp_path / "v"
    store.mkdir()
    variants = _variant_set(tmp_path)

    def pick(runtime: Graphs, threads: int) -> str:
        return pick_graph(
            runtime, variants, "auto", REQUEST, threads=threads, store=store, clock=runtime.clock
        )

    assert pick(Graphs({"float": 1.0, "fused": 0.9, "int8": 0.45}), 2) == "int8"
    # Now int8 would measure slower (a busy moment): the kept choice stands, unmeasured.
    again = Graphs({"float": 1.0, "fused": 0.9, "int8": 5.0})
    assert pick(again, 2) == "int8"
    assert again.used == ["int8"]
    # Another thread count is another machine, as far as speed goes: measured anew.
    assert pick(Graphs({"float": 1.0, "fused": 0.9, "int8": 5.0}), 1) == "fused"
    assert len(json.loads((store / "choice.json").read_text())) == 2


def test_a_named_graph_is_used_as_it_is_and_one_not_made_is_refused(tmp_path: Path) -> None:
    runtime = Graphs({"float": 1.0, "fused": 0.9})
    variants = _variant_set(tmp_path)
    assert pick_graph(runtime, variants, "int8", REQUEST, threads=None, store=None) == "int8"
    assert runtime.used == ["int8"]
    del variants["int8"]
    with pytest.raises(ModelUnavailable, match="--graph int8: this export has no int8 graph"):
        pick_graph(runtime, variants, "int8", REQUEST, threads=None, store=None)


def test_the_float_graph_alone_is_nothing_to_choose(tmp_path: Path) -> None:
    runtime = Graphs({"float": 1.0})
    only = {"float": _variant_set(tmp_path)["float"]}
    assert pick_graph(runtime, only, "auto", REQUEST, threads=None, store=None) == "float"
    assert runtime.used == []


def test_variants_that_cannot_be_built_leave_the_float_graph(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A folder that is no export: the build's child fails and says why in one line; the
    worker goes on with the float graph, and nothing half-made is left to be found."""
    export = tmp_path / "export"
    export.mkdir()
    (export / "export.json").write_text("{}")
    with caplog.at_level(logging.WARNING, logger="speechd.engine"):
        found = _variants.ensure_variants(export, tmp_path / "model", tmp_path / "cache")
    assert list(found) == ["float"] and found["float"].path == export / "back.onnx"
    assert "graph variants cannot be built" in caplog.text
    assert _variants.find_variants(export, tmp_path / "cache") is None
