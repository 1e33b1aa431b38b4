"""Casts on a 3-node JetStream cluster with R3 streams: the node leading the store's stream is
SIGKILLed while two workers are mid-cast; every cast still completes with nothing lost (each
latest attempt holds every chunk once, in order, byte for byte) and the cursor passes every
job. The killed node then comes back and serves the same casts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.engines import expected_audio
from harness.nats import NatsCluster
from speechd.casts.schema import cast_stream
from speechd.durable import open_store
from tests.durable.test_nats_cluster import leader_of
from tests.worker._helpers import (
    complete_audio,
    ended,
    records,
    submit_text,
    wait_cursor,
    wait_ended,
)

from ._workers import owners, wait_ready, worker_processes

pytestmark = [pytest.mark.nats, pytest.mark.slow]

TEXTS = [" ".join(f"{word}{n}" for word in ("delta", "echo", "foxtrot") * 12) for n in range(6)]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    cluster = NatsCluster(tmp_path, 3).start()
    yield cluster
    cluster.stop()


async def test_a_node_killed_mid_cast_loses_nothing(cluster: NatsCluster) -> None:
    url = f"{cluster.url}/?namespace=r3casts&shards=1&replicas=3"
    ids = ["w0", "w1"]
    async with await open_store(url) as store:
        with worker_processes(url, ids, rtf=0.25, overhead_s=0.01):
            await wait_ready(store, ids)
            casts = [await submit_text(store, text) for text in TEXTS]
            deadline = time.monotonic() + 60
            while not [c for c in await owners(store, casts) if await ended(store, c) is None]:
                assert time.monotonic() < deadline, "casts never got going"
                await asyncio.sleep(0.05)
            leader = await leader_of(cluster.nodes[0].url, "speechd_r3casts_0")
            doomed = next(n for n in cluster.nodes if n.name == leader)
            doomed.kill()  # the stream's leader, with appends in flight
            ends = await wait_ended(store, casts, within=120)
            await wait_cursor(store, len(casts))
        assert set(ends.values()) == {"eos"}
        for cid, text in zip(casts, TEXTS, strict=True):
            assert complete_audio(await records(store, cast_stream(cid))) == expected_audio(
                cid, text
            )
    doomed.start()
    async with await open_store(f"{doomed.url}/?namespace=r3casts") as late:
        # Catching up is Raft's business, not an append: nothing to wait on but time.
        await wait_cursor(late, len(casts), within=30)
        for cid, text in zip(casts, TEXTS, strict=True):
            assert complete_audio(await records(late, cast_stream(cid))) == expected_audio(
                cid, text
            )
