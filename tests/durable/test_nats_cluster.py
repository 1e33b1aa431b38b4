"""The NATS backend on a 3-node JetStream cluster with R3 streams: the stream's leader is
killed while a writer appends and followers on the other nodes follow; nothing acknowledged is
lost, followers see every record once and in order, the writer's conditions still hold."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from harness.nats import NatsCluster
from speechd.durable import AppendRecord, Store, open_store

from ._support import read_all

pytestmark = [pytest.mark.nats, pytest.mark.slow]

STREAM = "pub/casts/r3"
RECORDS = 120


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    cluster = NatsCluster(tmp_path, 3).start()
    yield cluster
    cluster.stop()


async def leader_of(url: str, js_stream: str) -> str:
    """The server name leading `js_stream` (waits for one to be elected)."""
    deadline = time.monotonic() + 30
    nc = await nats.connect(url)
    try:
        while time.monotonic() < deadline:
            response = await nc.request(f"$JS.API.STREAM.INFO.{js_stream}", b"", 5)
            leader = json.loads(response.data).get("cluster", {}).get("leader")
            if leader:
                return str(leader)
            await asyncio.sleep(0.1)
    finally:
        await nc.close()
    raise AssertionError(f"{js_stream} has no leader")


async def test_killing_the_leader_mid_stream_loses_nothing(cluster: NatsCluster) -> None:
    url = f"{cluster.url}/?namespace=r3&shards=1&replicas=3&retry=60"
    writer = await open_store(url)
    try:
        await writer.append(STREAM, [AppendRecord(b"meta")], match_seq_num=0)
        leader = await leader_of(cluster.nodes[0].url, "speechd_r3_0")
        others = [n for n in cluster.nodes if n.name != leader]
        doomed = next(n for n in cluster.nodes if n.name == leader)
        followers: list[Store] = [
            await open_store(f"{n.url}/?namespace=r3&retry=60") for n in others
        ]
        seen: list[list[bytes]] = [[] for _ in followers]

        async def follow(i: int) -> None:
            async for record in followers[i].follow(STREAM):
                assert record.seq_num == len(seen[i])
                seen[i].append(record.body)
                if len(seen[i]) == RECORDS + 1:
                    return

        following = [asyncio.ensure_future(follow(i)) for i in range(len(followers))]
        next_seq = 1
        for i in range(RECORDS):
            if i == RECORDS // 3:
                doomed.kill()  # mid-stream, with appends in flight around it
            ack = await writer.append(STREAM, [AppendRecord(b"%d" % i)], match_seq_num=next_seq)
            assert ack.start_seq == next_seq
            next_seq = ack.next_seq
            await asyncio.sleep(0.005)
        await asyncio.wait_for(asyncio.gather(*following), 60)
        want = [b"meta"] + [b"%d" % i for i in range(RECORDS)]
        assert seen == [want] * len(followers)
        # The killed node comes back, catches up, and serves the same stream.
        doomed.start()
        async with await open_store(f"{doomed.url}/?namespace=r3&retry=60") as late:
            # Catching up is Raft's business, not an append: nothing to wait on but time.
            deadline = time.monotonic() + 30
            while await late.check_tail(STREAM) < len(want) and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.1)
            assert [r.body for r in await read_all(late, STREAM)] == want
        for follower in followers:
            await follower.close()
    finally:
        await writer.close()
