"""A store that cannot be opened (here: no NATS server where `--store` points) stops
`speechd api` and `speechd worker` with one line that says so, exit status 1, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness.nats import free_port
from harness.servers import ROOT


@pytest.mark.parametrize("command", ["api", "worker"])
def test_an_unreachable_store_is_one_line_and_exit_1(command: str) -> None:
    url = f"nats://127.0.0.1:{free_port()}/?timeout=1&retry=1"
    env = {**os.environ, "SPEECHD_STORE": url, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "speechd", command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    assert "cannot open the store: cannot connect to NATS at" in result.stderr
    assert "Traceback" not in result.stderr
