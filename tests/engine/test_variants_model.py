"""Every decoder graph a worker on this CPU can speak with (`--graph`: float, fused, int8), on
the real weights (tier `model`), against torch's float32: the same durations on every chunk
(word timings are read off them), each chunk's log-spectral distance within its bound (1.0 dB
for float graphs, 2.5 dB for int8) and the recogniser's recall within 0.02 of torch's, on the
fixed texts and voices `loadtest.bench_engine` prints the same figures for
(`loadtest._quality`). The variants are built once into the model folder's export (a few
minutes on 2 cores); `auto`'s choice is one of them."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from loadtest._quality import Rendering, compare, render
from speechd.engine import EngineConfig, load_engine
from speechd.errors import ModelUnavailable

pytestmark = pytest.mark.model

BOUND_DB = {"float": 1.0, "fused": 1.0, "int8": 2.5}


@pytest.fixture(scope="module")
def reference(model_dir: Path) -> list[Rendering]:
    engine = load_engine(EngineConfig(model_dir=str(model_dir), device="cpu", engine="torch"))
    rendered = render(engine)
    del engine
    gc.collect()
    return rendered


@pytest.mark.parametrize("graph", ["float", "fused", "int8"])
def test_every_graph_that_can_be_chosen_times_speech_as_torch_and_keeps_its_bound(
    graph: str, model_dir: Path, reference: list[Rendering]
) -> None:
    config = EngineConfig(model_dir=str(model_dir), device="cpu", engine="onnx", graph=graph)
    try:
        engine = load_engine(config)
    except ModelUnavailable as exc:
        if graph == "int8" and "no int8 graph" in exc.message:
            pytest.skip(f"no int8 graph was made on this machine: {exc.message}")
        raise
    assert engine.graph == graph
    assert engine.fingerprint.endswith("onnx") == (graph == "float")
    quality = compare(render(engine), reference)
    assert quality.same_durations == quality.chunks
    assert quality.max_db <= BOUND_DB[graph], quality.distance_db
    assert quality.recall >= quality.reference_recall - 0.02, quality


def test_auto_speaks_with_one_of_the_graphs_and_says_which(model_dir: Path) -> None:
    config = EngineConfig(model_dir=str(model_dir), device="cpu", engine="onnx", graph="auto")
    engine = load_engine(config)
    assert engine.graph in ("float", "fused", "int8")
    if engine.graph != "float":
        assert f", {engine.graph} graph" in engine.detail
        assert f"onnx:{engine.graph}:" in engine.fingerprint
