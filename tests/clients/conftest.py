"""One live server for the client tests: `speechd api` on loopback with the real worker as its
own supervised process (`harness.workers.worker_process`: only the engine is the test
double), on one store in a temp folder. The api wants an API key, so the tests see both sides
of it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.engines import VOICES
from harness.servers import LiveServer, start_server
from harness.workers import worker_process

__all__ = ["AUDIO_PER_CHAR", "KEY", "VOICES"]

KEY = "sk-clients-test"
AUDIO_PER_CHAR = 0.002
"""Seconds of audio the engine double makes per character of text."""


@pytest.fixture(scope="package")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data = tmp_path_factory.mktemp("clients") / "data"
    # Made at a fifth of real time: even a text of 5000 characters is done in two seconds.
    with (
        worker_process(data, rtf=0.2, overhead_s=0.01, audio_per_char=AUDIO_PER_CHAR),
        start_server(["api", "--data-dir", str(data), "--api-key", KEY]) as live,
    ):
        yield live
