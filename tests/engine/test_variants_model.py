"""Every decoder a worker on this CPU can speak with (`--graph`: float, fused, int8 on ONNX
Runtime; fused on torch), on the real weights (tier `model`), on the fixed texts and voices
`loadtest.bench_engine` prints the same figures for (`loadtest._quality`), against torch's
float32: the same durations on every chunk (word timings are read off them; every ONNX
Runtime graph's are the float graph's, chunk for chunk: only the decoder differs), each
chunk's log-spectral distance within its bound (1.0 dB for a float graph, 2.5 dB for int8)
and the recogniser's recall within 0.02 of torch's. Measured (ONNX Runtime 1.32, 12
chunks): float and fused 0.27 dB mean, 0.35 largest; int8 1.43 and 1.57; torch's fused
decoder 0.05 and 0.09 from its own float; recall 0.96 on every one. The variants are built
once into the model folder's export (a few minutes on 2 cores)."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from loadtest._quality import Rendering, compare, render
from speechd.engine import EngineConfig, load_engine
from speechd.errors import ModelUnavailable

pytestmark = pytest.mark.model

BOUND_DB = {"float": 1.0, "fused": 1.0, "int8": 2.5}


def _render(model_dir: Path, engine: str, graph: str) -> list[Rendering]:
    config = EngineConfig(model_dir=str(model_dir), device="cpu", engine=engine, graph=graph)  # type: ignore[arg-type]
    loaded = load_engine(config)
    assert loaded.graph == graph
    rendered = render(loaded)
    del loaded
    gc.collect()
    return rendered


@pytest.fixture(scope="module")
def torch_float(model_dir: Path) -> list[Rendering]:
    return _render(model_dir, "torch", "float")


@pytest.fixture(scope="module")
def onnx_float(model_dir: Path) -> list[Rendering]:
    return _render(model_dir, "onnx", "float")


@pytest.mark.parametrize(
    ("engine", "graph"),
    [("onnx", "float"), ("onnx", "fused"), ("onnx", "int8"), ("torch", "fused")],
)
def test_every_decoder_that_can_be_chosen_keeps_the_timings_and_its_bound(
    engine: str,
    graph: str,
    model_dir: Path,
    torch_float: list[Rendering],
    onnx_float: list[Rendering],
) -> None:
    try:
        got = _render(model_dir, engine, graph)
    except ModelUnavailable as exc:
        if graph == "int8" and "no int8 graph" in exc.message:
            pytest.skip(f"no int8 graph was made on this machine: {exc.message}")
        raise
    same_runtime = onnx_float if engine == "onnx" else torch_float
    assert [r.durations for r in got] == [r.durations for r in same_runtime]
    quality = compare(got, torch_float)
    print(f"{engine} {graph}: {quality}")  # the figures, for -rA
    assert quality.same_durations == quality.chunks, quality
    assert quality.max_db <= BOUND_DB[graph], quality.distance_db
    assert quality.recall >= quality.reference_recall - 0.02, quality


def test_auto_speaks_with_one_of_the_graphs_and_says_which(model_dir: Path) -> None:
    config = EngineConfig(model_dir=str(model_dir), device="cpu", engine="onnx", graph="auto")
    engine = load_engine(config)
    assert engine.graph in ("float", "fused", "int8")
    if engine.graph != "float":
        assert f", {engine.graph} graph" in engine.detail
        assert f"onnx:{engine.graph}:" in engine.fingerprint
