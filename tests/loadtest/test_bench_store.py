"""The store benchmark's sweep line works and measures what it says (no figures judged)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.bench_store import sweep_latency

pytestmark = pytest.mark.slow


async def test_the_sweep_line_times_live_appends_quiet_and_while_sweeping(tmp_path: Path) -> None:
    data = tmp_path / "store"
    result = await sweep_latency(str(data), 20, 4, 1024, data)
    assert result.removed == 20
    assert result.quiet and result.sweeping
    assert result.appended >= len(result.quiet) + len(result.sweeping)
    assert result.file_before is not None and result.file_after is not None
