"""The soak benchmark runs end to end and prints what it says (no figures judged)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.bench_soak import main

pytestmark = pytest.mark.slow


def test_a_small_soak_prints_the_folder_over_time_and_the_chunk_delays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--casts", "40", "--rate", "40", "--retention", "1", "--linger", "3"]
    main([*args, "--backends", "embedded", "--dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert "load average before" in out and "load average after" in out
    assert "all 40 ended" in out
    assert "folder: peak" in out and "chunk delay" in out and "outside sweeps" in out
    last = [line for line in out.splitlines() if line.strip().startswith(tuple("0123456789"))][-1]
    assert "40..40" in last  # jobs trimmed below the cursor: first seq = tail
