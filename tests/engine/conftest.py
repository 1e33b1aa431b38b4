"""Engine fixtures beyond the shared tiny model (tests/support/tiny_model.py): the same tiny
model on ONNX Runtime, over its export, and an engine on each runtime in turn."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from speechd.engine import Engine, EngineConfig, load_engine
from tests.support.tiny_model import export_tiny


@pytest.fixture(scope="session")
def tiny_onnx_engine(tiny_model_dir: Path) -> Iterator[Engine]:
    """The same tiny model on ONNX Runtime, over its export."""
    export_tiny(tiny_model_dir)
    yield load_engine(EngineConfig(model_dir=str(tiny_model_dir), device="cpu", engine="onnx"))


@pytest.fixture(params=["torch", "onnx"])
def engine(request: pytest.FixtureRequest) -> Engine:
    """The tiny model on each runtime in turn: the engine contract holds on both."""
    name = "tiny_engine" if request.param == "torch" else "tiny_onnx_engine"
    value: Engine = request.getfixturevalue(name)
    return value
