"""SIGKILL an appending process at random moments, again and again: no acknowledged record is
ever lost, none is torn, no batch is half there, and the seqs stay dense.

The child (`_procs._crash_append`) prints one line per acknowledged batch, after the ack, in a
single write(2); whatever it printed before it died was acknowledged.

On a store behind a server (NATS), an append the child had sent in full before it died may
still be committed a moment after its death (unacknowledged, but whole): the check waits for
the store to settle first.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading
import zlib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

from speechd.durable import AppendRecord, Record, Store, open_store

from ._support import read_all

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 15


@dataclass(frozen=True)
class Ack:
    stream: str
    start: int
    next: int
    crcs: tuple[str, ...]


class Child:
    """A crash appender in a subprocess, its stdout collected by a thread."""

    def __init__(self, url: str, tag: str, seed: int) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.durable._procs", "crash-append", url, tag, str(seed)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
        )
        self.lines: list[str] = []
        self.ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode()
            if not line.endswith("\n"):
                break  # cannot happen (one write per line), and would not be an ack anyway
            if line == "ready\n":
                self.ready.set()
            self.lines.append(line.rstrip("\n"))

    def kill(self) -> list[Ack]:
        """SIGKILL the child; the batches it reported as acknowledged."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self._reader.join(30)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        acks = []
        for line in self.lines:
            if line.startswith("ack "):
                _, stream, start, nxt, crcs = line.split(" ")
                acks.append(Ack(stream, int(start), int(nxt), tuple(crcs.split(","))))
        return acks


async def settle(store: Store) -> None:
    """Wait until two listings 50 ms apart agree: appends still in flight have landed."""
    previous = None
    for _ in range(100):
        listing = await store.list("crash/")
        if listing == previous:
            return
        previous = listing
        await asyncio.sleep(0.05)
    raise AssertionError("the store never settled after the child died")


async def check_store(store: Store, acked: list[Ack]) -> int:
    """Everything the store holds is intact; every acknowledged batch is there. Returns the
    number of records checked."""
    contents: dict[str, list[Record]] = {}
    for info in await store.list("crash/"):
        records = await read_all(store, info.name)
        contents[info.name] = records
        assert [r.seq_num for r in records] == list(range(len(records))), info.name
        assert info.next_seq == len(records) == await store.check_tail(info.name)
        batches: dict[bytes, list[Record]] = defaultdict(list)
        for record in records:
            assert record.header(b"crc") == b"%08x" % zlib.crc32(record.body), "torn record"
            batches[record.header(b"batch") or b""].append(record)
        for batch_id, batch in batches.items():
            n = int(batch[0].header(b"n") or b"0")
            assert [int(r.header(b"i") or b"-1") for r in batch] == list(range(n)), batch_id
            seqs = [r.seq_num for r in batch]
            assert seqs == list(range(seqs[0], seqs[0] + n)), "a batch interleaved or partial"
    for ack in acked:
        records = contents.get(ack.stream, [])[ack.start : ack.next]
        got = tuple(r.header(b"crc").decode() for r in records)  # type: ignore[union-attr]
        assert got == ack.crcs, f"acknowledged batch lost: {ack}"
    return sum(len(r) for r in contents.values())


async def test_acknowledged_appends_survive_sigkill_at_random_moments(store_url: str) -> None:
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    print(f"crash test seed {seed}")  # shown on failure
    rng.seed(seed)
    acked: list[Ack] = []
    # A handle that stays open in this process across every crash, as the api would.
    async with await open_store(store_url) as bystander:
        for round_ in range(ROUNDS):
            child = Child(store_url, f"r{round_}", rng.randrange(1 << 30))
            if round_ % 5 == 4:
                # Now and then, kill it before or while it opens the store.
                await asyncio.sleep(rng.uniform(0, 0.4))
            else:
                assert await asyncio.to_thread(child.ready.wait, 60), "child never got ready"
                await asyncio.sleep(rng.uniform(0.02, 0.5))
            acks = child.kill()
            acked += acks
            # Reopen, as a restarted process would, and check everything.
            async with await open_store(store_url) as reopened:
                await settle(reopened)
                present = await check_store(reopened, acked)
            print(
                f"round {round_}: {sum(a.next - a.start for a in acks)} records acknowledged,"
                f" {present - sum(a.next - a.start for a in acked)} more committed unacknowledged"
            )
            # The bystander's handle still works: no lock was left held by the dead child.
            ack = await asyncio.wait_for(
                bystander.append("bystander", [AppendRecord(b"%d" % round_)]), 30
            )
            assert ack.start_seq == round_
        checked = await check_store(bystander, acked)
    assert len(acked) > ROUNDS  # the children did get work acknowledged
    assert checked >= sum(a.next - a.start for a in acked)
