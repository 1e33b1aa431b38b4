"""The batch benchmark measures what it says on the tiny model (no figures judged)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.bench_batch import measure, report
from speechd.engine import EngineConfig, load_engine
from tests.support.tiny_model import make_tiny_model_dir

pytestmark = pytest.mark.slow


def test_the_cost_per_item_is_printed_against_batch_1_of_the_same_run(tmp_path: Path) -> None:
    root = make_tiny_model_dir(tmp_path / "tiny", ("af_heart",))
    engine = load_engine(EngineConfig(model_dir=str(root), device="cpu", engine="torch"))
    result = measure(engine, "af_heart", tokens=12, sizes=[1, 2], repeat=1)
    assert [row["size"] for row in result["rows"]] == [1, 2]
    assert 12 <= result["tokens"] < 30 and result["max_batch"] == 16
    assert all(row["best_s"] > 0 and row["audio_s"] > 0 for row in result["rows"])
    assert "1" in result["warm_up_costs"] and result["auto"] >= 1
    lines = report(result)
    per_item = lines[3].split()  # batch 2: pass, median, per item, x batch 1, rtf/item
    ratio = float(per_item[3]) / result["rows"][0]["best_s"]
    assert per_item[0] == "2" and float(per_item[4]) == pytest.approx(ratio, abs=0.01)
    assert lines[-1].endswith(f"would keep: {result['auto']}")
