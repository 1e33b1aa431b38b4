"""One live server for the client tests: `speechd api` on loopback, with a real worker process
(speechd.worker's `Supervisor`) synthesizing with the cost-model engine double of
tests/worker/_fakes.py and speechd's real encoders, on one store in a temp folder. The api
wants an API key, so the tests see both sides of it."""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest

from speechd.engine import EngineConfig
from speechd.worker import Parts, Supervisor, WorkerConfig
from tests.api._live import LiveServer, start_server
from tests.worker import _fakes as engine_double

KEY = "sk-clients-test"
VOICES = ["af_heart", "am_adam"]  # what the engine double has installed


@pytest.fixture(scope="package")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data = tmp_path_factory.mktemp("clients") / "data"
    # 5 ms of audio per character, made at a fifth of real time, and never paced to real
    # time (comfortable_lead_s): even a text of 5000 characters is done in seconds.
    engine = functools.partial(
        engine_double.load_engine, rtf=0.2, overhead_s=0.01, audio_per_char=0.005
    )
    config = WorkerConfig(
        store=str(data), engine=EngineConfig(), heartbeat_s=0.5, comfortable_lead_s=3600
    )
    supervisor = Supervisor(
        config,
        parts=Parts(load_engine=engine, chunk_policy=engine_double.FakeChunkPolicy),
    )
    supervisor.start()
    try:
        with start_server(["api", "--data-dir", str(data), "--api-key", KEY]) as live:
            yield live
    finally:
        supervisor.stop()
