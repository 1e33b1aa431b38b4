"""Two `speechd api` replicas on one NATS store: a cast submitted through one is followed
live through the other, and both serve the same bytes.

A real worker process (the cost-model engine, speechd's encoders) makes the cast. The second
replica follows by the cast's identity: the same request names the same cast, so
it tails the stream the first replica created instead of making another.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from harness.engines import chunked_text
from harness.servers import start_server
from harness.workers import expected
from speechd.audio import new_encoder
from speechd.durable import open_store

from ._workers import wait_ready, worker_processes

pytestmark = [pytest.mark.nats, pytest.mark.slow]

CHUNKS = 8
CHUNK_DELAY_S = 0.25  # the engine's cost per chunk, on top of its (small) real-time factor


async def _ready(url: str, ids: list[str]) -> None:
    async with await open_store(url) as store:
        await wait_ready(store, ids)


def test_a_cast_submitted_through_one_replica_is_followed_live_through_the_other(
    nats_url: str,
) -> None:
    text = chunked_text(CHUNKS)
    payload = {"model": "kokoro", "voice": "af_heart", "response_format": "wav", "input": text}
    with worker_processes(nats_url, ["w0"], encoders=new_encoder, overhead_s=CHUNK_DELAY_S):
        asyncio.run(_ready(nats_url, ["w0"]))
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
    wanted = expected(cast_id, text, fmt="wav")
    assert made_body == wanted
    assert b"".join(pieces) == wanted
    # Live: the second replica's listener got audio well before the last chunk was made
    # (the worker spends CHUNK_DELAY_S on each).
    assert arrivals[-1] - arrivals[0] > (CHUNKS - 3) * CHUNK_DELAY_S
