"""The embedded backend across processes: wake datagrams do the waking, and a killed process's
registration is cleaned up by the next append."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from speechd.durable import AppendRecord, open_store

from . import _procs
from ._support import SPAWN, follow_round_trips, processes, results_of

pytestmark = pytest.mark.slow

NO_POLL = 60.0  # the children's data_version poll: too slow to wake anyone during a test
ROOT = Path(__file__).resolve().parents[2]


def _can_unshare() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode == 0


async def test_a_follower_in_another_process_is_woken_by_the_datagram(embedded_url: str) -> None:
    queue = SPAWN.Queue()
    async with await open_store(embedded_url) as store:
        with processes(_procs.echo_follower, [(embedded_url, "live", 20, queue, NO_POLL)]):
            assert await results_of(queue, 1) == [("ready", None)]
            latencies = await follow_round_trips(store, queue, "live", 20)
    assert max(latencies) < 1.0, latencies


async def test_a_killed_followers_registration_goes_and_the_others_still_hear(
    embedded_url: str,
) -> None:
    wake_dir = Path(embedded_url) / "wake"
    doomed_queue, live_queue = SPAWN.Queue(), SPAWN.Queue()
    args = [
        (embedded_url, "f", 100, doomed_queue, NO_POLL),
        (embedded_url, "f", 100, live_queue, NO_POLL),
    ]
    async with await open_store(embedded_url) as store:
        with processes(_procs.echo_follower, args) as (doomed, _live):
            assert await results_of(doomed_queue, 1) == [("ready", None)]
            assert await results_of(live_queue, 1) == [("ready", None)]
            assert len(os.listdir(wake_dir)) == 3
            doomed.kill()
            await asyncio.to_thread(doomed.join, 10)
            assert len(os.listdir(wake_dir)) == 3  # its registration outlives it...
            latencies = await follow_round_trips(store, live_queue, "f", 10)
            assert len(os.listdir(wake_dir)) == 2  # ...until the first append's broadcast
            assert max(latencies) < 1.0, latencies
            await store.append("f", [AppendRecord(b"more")])
            assert (await results_of(live_queue, 1))[0][0] == 10


@pytest.mark.skipif(not _can_unshare(), reason="needs unshare -rn (user namespaces)")
async def test_stores_in_another_network_namespace_still_wake_each_other(
    embedded_url: str,
) -> None:
    """Two stores in a network namespace of their own (a container sharing the volume), one
    here. Our appends' datagrams to them are refused (abstract sockets are per namespace);
    they must still wake each other by datagram afterwards."""
    async with await open_store(embedded_url) as here:
        child = await asyncio.create_subprocess_exec(
            *("unshare", "-rn", sys.executable, "-m", "tests.durable._procs"),
            *("namespace-pair", embedded_url),
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert child.stdout is not None and child.stdin is not None
        try:
            assert await asyncio.wait_for(child.stdout.readline(), 60) == b"ready\n"
            assert len(os.listdir(Path(embedded_url) / "wake")) == 3
            for i in range(2):  # the second ack comes after the first broadcast was refused
                await here.append("here", [AppendRecord(b"%d" % i)])
            assert len(os.listdir(Path(embedded_url) / "wake")) == 3
            child.stdin.write(b"go\n")
            await child.stdin.drain()
            answer = (await asyncio.wait_for(child.stdout.readline(), 60)).decode().split()
            assert answer[:1] == ["woke"], answer
            assert float(answer[1]) < 5.0  # a datagram: milliseconds; the poll is off
        finally:
            if child.returncode is None:
                child.kill()
            await child.wait()
