"""Helpers for the worker tests: submitting casts, running a worker, checking cast streams."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from harness.engines import CostEngine, FakeChunkPolicy, FakeEncoder
from harness.forwarding import ForwardingStore
from speechd.casts import cast_id, deployment_secret, submit
from speechd.casts._records import audio_chunk
from speechd.casts.schema import (
    JOBS_CURSOR,
    Cursor,
    Eos,
    Event,
    Recipe,
    Start,
    cast_stream,
    decode,
    event_of,
)
from speechd.durable import (
    AppendAck,
    AppendRecord,
    Record,
    Store,
)
from speechd.worker import ChunkTimes, Worker, WorkerConfig
from speechd.worker._batching import BatchCosts
from speechd.worker._policy import Policy
from speechd.worker._protocols import EncoderFactory
from tests.support.streams import read_stream


async def submit_text(
    store: Store,
    text: str,
    *,
    speed: float = 1.0,
    voice: str = "af_heart",
    fmt: str = "pcm",
    at_once: bool = False,
) -> str:
    secret = await deployment_secret(store)
    cid = cast_id(secret, model="kokoro", voice=voice, speed=speed, format=fmt, text=text)
    recipe = Recipe(
        text=text,
        model="kokoro",
        voice=voice,
        speed=speed,
        format=fmt,
        title=text[:20],
        created_ms=int(time.time() * 1000),
    )
    await submit(store, cid, recipe, sample_rate=24_000, at_once=at_once)
    return cid


def make_worker(
    store: Store,
    engine: CostEngine | None = None,
    *,
    worker_id: str = "w1",
    policy: Policy | None = None,
    encoders: EncoderFactory = FakeEncoder,
    chunk_policy: FakeChunkPolicy | None = None,
    times: ChunkTimes | None = None,
    batch_costs: BatchCosts | None = None,
    **settings: Any,
) -> Worker:
    """A worker on the cost model; `settings` are its `WorkerConfig`'s."""
    return Worker(
        store,
        engine or CostEngine(),
        WorkerConfig(worker_id=worker_id, **settings),
        chunk_policy=chunk_policy or FakeChunkPolicy(),
        encoders=encoders,
        policy=policy,
        times=times,
        batch_costs=batch_costs,
    )


@contextlib.asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[asyncio.Event]:
    """Run `worker` in a task; on exit stop it and re-raise whatever ended it."""
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        yield stop
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        await worker.idle()  # an abandoned chunk must not overlap the next user of the engine


records = read_stream  # the worker tests' name for it


async def ended(store: Store, cid: str) -> str | None:
    tail = await store.check_tail(cast_stream(cid))
    if tail == 0:
        return None
    last = (await store.read(cast_stream(cid), tail - 1)).records[0]
    event = event_of(last)
    return event if event in (Event.EOS, Event.ERROR) else None


async def wait_ended(store: Store, ids: list[str], within: float = 20.0) -> dict[str, str]:
    deadline = time.monotonic() + within
    while True:
        ends = {cid: await ended(store, cid) for cid in ids}
        if all(ends.values()):
            return ends  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise AssertionError(f"casts did not end in {within} s: {ends}")
        await asyncio.sleep(0.05)


async def ended_stream(store: Store, cid: str, within: float = 60.0) -> list[Record]:
    """The whole stream of cast `cid` once it has ended (eos or error)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        stream = await records(store, cast_stream(cid))
        if event_of(stream[-1]) in (Event.EOS, Event.ERROR):
            return stream
        await asyncio.sleep(0.05)
    raise AssertionError(f"cast {cid} did not end in {within} s")


async def cursor(store: Store) -> int:
    tail = await store.check_tail(JOBS_CURSOR)
    if tail == 0:
        return 0
    return decode((await store.read(JOBS_CURSOR, tail - 1)).records[0].body, Cursor).offset


async def wait_cursor(store: Store, offset: int, within: float = 20.0) -> None:
    """Wait until the committed cursor reaches `offset`: a worker commits it just after the
    eos that ended a job's cast, or on its next look at a job another worker finished."""
    deadline = time.monotonic() + within
    while (found := await cursor(store)) < offset:
        if time.monotonic() > deadline:
            raise AssertionError(f"the cursor stayed at {found} < {offset} for {within} s")
        await asyncio.sleep(0.05)
    assert found == offset, f"the cursor went past the jobs: {found} > {offset}"


def check_layout(stream: list[Record]) -> list[list[Record]]:
    """Assert the cast stream's layout; return its attempts (each: start, own audio...).

    meta first; after each start only that attempt's own audio, indices `keep`, `keep + 1`,
    ... in order (`i` counts the playable sequence); a terminal record only last, or an error
    followed by a retry and a new attempt.
    """
    assert event_of(stream[0]) == Event.META
    attempts: list[list[Record]] = []
    for n, record in enumerate(stream[1:], start=1):
        event = event_of(record)
        attempt = int(record.header(b"a") or b"0")
        if event == Event.START:
            assert not attempts or attempt > int(attempts[-1][0].header(b"a") or b"0")
            attempts.append([record])
        elif event == Event.AUDIO:
            assert attempts, "audio before any start"
            current = attempts[-1]
            assert attempt == int(current[0].header(b"a") or b"0"), "audio of another attempt"
            keep = decode(current[0].body, Start).keep
            assert audio_chunk(record).index == keep + len(current) - 1, "audio out of order"
            assert audio_chunk(record).start_seq == current[0].seq_num
            current.append(record)
        elif event == Event.RETRY:
            assert event_of(stream[n - 1]) == Event.ERROR, "a retry after something but error"
        else:
            assert event in (Event.EOS, Event.ERROR), event
            later = stream[n + 1 :]
            assert not later or (event == Event.ERROR and event_of(later[0]) == Event.RETRY), (
                "records after the terminal one"
            )
            if attempts:
                assert attempt == int(attempts[-1][0].header(b"a") or b"0")
    return attempts


def playable(stream: list[Record]) -> list[Record]:
    """The latest attempt's playable sequence: its kept spans, then its own audio."""
    attempts = check_layout(stream)
    if not attempts:
        return []
    start = decode(attempts[-1][0].body, Start)
    by_seq = {r.seq_num: r for r in stream}
    kept = [by_seq[span.seq + k] for span in start.kept for k in range(span.count)]
    out = [*kept, *attempts[-1][1:]]
    assert [audio_chunk(r).index for r in out] == list(range(len(out)))
    return out


def complete_audio(stream: list[Record]) -> bytes:
    """The playable sequence's audio: every record once, in order, ending in eos."""
    assert event_of(stream[-1]) == Event.EOS
    chunks = [audio_chunk(r) for r in playable(stream)]
    assert all(c.planned == len(chunks) for c in chunks[-1:])
    assert decode(stream[-1].body, Eos).chunks == len(chunks)
    return b"".join(c.body for c in chunks)


class Partitioned(ForwardingStore):
    """Another store seen through a bad network link that `cut()` opens: from then on,
    appends to streams under `prefix` never return, or with `lag_s`, take that long to go
    out (nothing else is affected)."""

    def __init__(self, inner: Store, prefix: str) -> None:
        super().__init__(inner)
        self.prefix = prefix
        self.is_cut = False
        self.lag_s: float | None = None

    def cut(self, lag_s: float | None = None) -> None:
        self.is_cut = True
        self.lag_s = lag_s

    async def append(
        self, stream: str, records: Sequence[AppendRecord], *, match_seq_num: int | None = None
    ) -> AppendAck:
        if self.is_cut and stream.startswith(self.prefix):
            if self.lag_s is None:
                await asyncio.Event().wait()
            await asyncio.sleep(self.lag_s)
        return await self.inner.append(stream, records, match_seq_num=match_seq_num)
