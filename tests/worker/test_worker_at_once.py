"""Casts that want their first audio at once (`start: now`, as Home Assistant's Wyoming door
asks) arriving together behind a listener on a device slower than real time: each gets its
first chunk ahead of its turn in line, and more jobs arriving while the worker opens them
change nothing (the worker read the line as it changed under it, died, and every listener
waited out a restart: CI's four Wyoming callers heard nothing for 27 s)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from harness.engines import CostEngine, chunked_text
from harness.forwarding import ForwardingStore
from speechd.casts.schema import JOBS, cast_stream
from speechd.durable import ReadBatch, Store
from speechd.worker._policy import DeadlinePolicy

from ._helpers import ended_stream, make_worker, playable, running, submit_text
from .test_worker_slow_device import first_audio_of, made_once

SLOWER = {"rtf": 1.2, "overhead_s": 0.02, "audio_per_char": 0.003}  # slower than real time
CALLERS = ("aaa", "bbb", "ccc", "ddd")


class JobsArriveMeanwhile(ForwardingStore):
    """The worker's store, on which the first read of each at-once cast's stream (the worker
    reading its head) waits until the next caller's job is in the worker's line: the line
    grows while the worker walks it."""

    def __init__(self, inner: Store, callers: Sequence[str]) -> None:
        super().__init__(inner)
        self.at_once: dict[str, str] = {}  # cast id -> its caller's word
        self.callers = list(callers)
        self._read: set[str] = set()  # the at-once casts whose stream was read
        self._lined_up = 0  # jobs the worker has read from `jobs`
        self._line = asyncio.Condition()

    async def submit(self, word: str) -> str:
        cid = await submit_text(self.inner, chunked_text(8).replace("word", word), at_once=True)
        self.at_once[cid] = word
        return cid

    async def read(self, stream: str, seq_num: int = 0, **options: Any) -> ReadBatch:
        first = stream not in self._read and stream in {cast_stream(c) for c in self.at_once}
        self._read.add(stream)
        if first and self.callers:
            await self.submit(self.callers.pop(0))
            wanted = await self.inner.check_tail(JOBS)
            async with self._line:
                await asyncio.wait_for(self._line.wait_for(lambda: self._lined_up >= wanted), 10)
            await asyncio.sleep(0)  # the intake puts the job in line as its read returns
        batch = await self.inner.read(stream, seq_num, **options)
        if stream == JOBS and batch.records:
            async with self._line:
                self._lined_up = batch.records[-1].seq_num + 1
                self._line.notify_all()
        return batch


async def test_at_once_callers_arriving_as_the_worker_opens_them_all_hear_their_first_audio(
    store: Store,
) -> None:
    engine = CostEngine(**SLOWER)
    wrapped = JobsArriveMeanwhile(store, CALLERS[1:])
    worker = make_worker(wrapped, engine, policy=DeadlinePolicy())
    await worker.warm_up("af_heart")
    lead = await submit_text(store, chunked_text(10).replace("word", "lead"))
    async with running(worker):
        await first_audio_of(store, lead)
        await wrapped.submit(CALLERS[0])
        heard = {cid: await ended_stream(store, cid, within=30) for cid in list(wrapped.at_once)}
        await ended_stream(store, lead, within=30)
    assert sorted(wrapped.at_once.values()) == sorted(CALLERS)  # every caller came
    for cid, stream in heard.items():
        assert made_once(stream, engine, wrapped.at_once[cid])
    # Nobody waits for another caller's whole reply before hearing its own first words: on
    # this device the replies are made one after another, their first chunks ahead of that.
    firsts = [playable(stream)[0].timestamp for stream in heard.values()]
    lasts = [stream[-1].timestamp for stream in heard.values()]
    assert max(firsts) < min(lasts), (firsts, lasts)
