"""Two and three `speechd worker` processes sharing one NATS store's jobs: they split the
casts, no cast is made by two at once, and when the worker holding casts is SIGKILLed, its
casts are taken over once their leases run out and complete elsewhere, each with its latest
attempt holding every chunk once, in order, byte for byte; the cursor passes every job."""

from __future__ import annotations

import asyncio
import time

import pytest

from harness.engines import expected_audio
from speechd.casts.schema import Start, cast_stream, decode
from speechd.durable import open_store
from tests.worker._helpers import (
    check_layout,
    complete_audio,
    ended,
    records,
    submit_text,
    wait_cursor,
    wait_ended,
)

from ._workers import owners, wait_ready, worker_processes

pytestmark = [pytest.mark.nats, pytest.mark.slow]

TEXTS = [" ".join(f"{word}{n}" for word in ("alpha", "bravo", "charlie") * 12) for n in range(9)]


@pytest.mark.parametrize("count", [2, 3])
async def test_workers_share_jobs_and_a_killed_ones_casts_complete_elsewhere(
    nats_url: str, count: int
) -> None:
    ids = [f"w{i}" for i in range(count)]
    async with await open_store(nats_url) as store:
        with worker_processes(nats_url, ids, rtf=0.25, overhead_s=0.01) as procs:
            await wait_ready(store, ids)
            casts = [await submit_text(store, text) for text in TEXTS]
            # Once several casts are under way, kill the worker holding the most of them.
            deadline = time.monotonic() + 60
            while True:
                held = await owners(store, casts)
                unfinished = {c: w for c, w in held.items() if await ended(store, c) is None}
                if len(unfinished) >= count:
                    break
                assert time.monotonic() < deadline, "casts never got going"
                await asyncio.sleep(0.05)
            by_worker: dict[str, list[str]] = {}
            for cid, worker in unfinished.items():
                by_worker.setdefault(worker, []).append(cid)
            victim = max(by_worker, key=lambda w: len(by_worker[w]))
            orphaned = by_worker[victim]
            procs[victim].kill()
            ends = await wait_ended(store, casts, within=120)
            await wait_cursor(store, len(casts))
            survivors = [w for w in ids if w != victim]
        assert set(ends.values()) == {"eos"}
        workers_seen = set()
        for cid, text in zip(casts, TEXTS, strict=True):
            stream = await records(store, cast_stream(cid))
            assert complete_audio(stream) == expected_audio(cid, text)
            attempts = [decode(a[0].body, Start) for a in check_layout(stream)]
            workers_seen.update(a.worker for a in attempts)
            if cid in orphaned:
                assert attempts[-1].worker in survivors, (cid, attempts)
        assert len(workers_seen) == count  # every worker made some of the casts
