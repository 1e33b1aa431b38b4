"""Two `speechd api` replicas on one NATS store: a cast submitted through one is followed
live through the other, and both serve the same bytes.

The second replica follows by the cast's identity: the same request names the same cast, so
it tails the stream the first replica created instead of making another.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.api._fakes import fake_audio
from tests.api._live import ROOT, start_server

pytestmark = [pytest.mark.nats, pytest.mark.slow]

CHUNKS = 8
CHUNK_DELAY_S = 0.25


@pytest.fixture
def fake_worker(nats_url: str) -> Iterator[None]:
    """The api tests' fake worker (it speaks the cast protocol), on the NATS store."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.api._fakes", "--store", nats_url,
         "--chunk-delay", str(CHUNK_DELAY_S)],
        cwd=ROOT,
    )  # fmt: skip
    try:
        yield
    finally:
        process.terminate()
        process.wait(10)


def test_a_cast_submitted_through_one_replica_is_followed_live_through_the_other(
    nats_url: str, fake_worker: None
) -> None:
    payload = {"model": "kokoro", "voice": "af_heart", "response_format": "wav",
               "input": f"Across replicas [chunks={CHUNKS}]"}  # fmt: skip
    with (
        start_server(["api", "--store", nats_url]) as first,
        start_server(["api", "--store", nats_url]) as second,
        httpx.stream("POST", first.v1 + "/audio/speech", json=payload, timeout=30) as made,
    ):
        assert made.status_code == 200
        cast_id = made.headers["x-cast-id"]
        arrivals = []
        pieces = []
        with httpx.stream(
            "POST", second.v1 + "/audio/speech", json=payload, timeout=30
        ) as followed:
            assert followed.status_code == 200
            assert followed.headers["x-cast-id"] == cast_id
            for piece in followed.iter_bytes():
                arrivals.append(time.monotonic())
                pieces.append(piece)
        made_body = made.read()
    expected = fake_audio("wav", CHUNKS)
    assert made_body == expected
    assert b"".join(pieces) == expected
    # Live: the second replica's listener got audio well before the last chunk was made
    # (the worker spends CHUNK_DELAY_S on each).
    assert arrivals[-1] - arrivals[0] > (CHUNKS - 3) * CHUNK_DELAY_S
