"""A fake worker for the api tests: it speaks the cast protocol (DESIGN.md §1, §3) on a real
store without a model. It announces itself in `workers/<id>`, reads `jobs` from the committed
cursor, and for each cast appends `start`, one `audio` record per chunk (a tone encoded by
`speechd.audio`, as the real worker encodes speech), `eos`, a receipt in
`progress/done`, and advances `jobs/_cursor` over finished jobs.

Markers in the text steer it: `[chunks=N]` makes N chunks, `[fail-early]` ends the cast with
an `error` record before any audio, `[fail-mid]` after the first chunk.

Run as a process: `python -m tests.api._fakes --store DIR [--chunk-delay S] [--chunks N]`
(stops on SIGTERM/SIGINT).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import math
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from speechd import casts
from speechd.audio import new_encoder
from speechd.durable import AppendRecord, Store, open_store

__all__ = ["CHUNK_MS", "VOICES", "FakeWorker", "fake_audio", "fake_records", "running_fake_worker"]

VOICES = ["af_bella", "af_heart", "am_adam", "bf_emma"]
CHUNK_MS = 200
_RATE = 24000


def _tone(index: int) -> np.ndarray:
    samples = _RATE * CHUNK_MS // 1000
    t = np.arange(samples) / _RATE
    return (np.sin(2 * math.pi * (330 + 20 * index) * t) * 0.3).astype("float32")


@functools.cache
def fake_records(fmt: str, chunks: int) -> tuple[bytes, ...]:
    """The audio record bodies of a fake cast: one `speechd.audio` encoder across the attempt,
    so they concatenate into one valid file (a body may be b"": no whole frame yet)."""
    encoder = new_encoder(fmt)
    return tuple(encoder.encode(_tone(i), final=i == chunks - 1) for i in range(chunks))


def fake_audio(fmt: str, chunks: int) -> bytes:
    """The whole file a fake cast of `chunks` chunks in `fmt` plays."""
    return b"".join(fake_records(fmt, chunks))


def _now_ms() -> int:
    return int(time.time() * 1000)


class FakeWorker:
    """Run with `await worker.run()` (until cancelled) on an open store."""

    def __init__(
        self,
        store: Store,
        *,
        worker_id: str = "fake-1",
        voices: list[str] | None = None,
        chunks: int = 3,
        chunk_delay: float = 0.02,
        heartbeat_s: float = 0.5,
    ) -> None:
        self.store = store
        self.worker_id = worker_id
        self.voices = voices or VOICES
        self.chunks = chunks
        self.chunk_delay = chunk_delay
        self.heartbeat_s = heartbeat_s
        self.casts_started: list[str] = []
        self._active: set[str] = set()
        self._finished: set[int] = set()
        self._cursor = 0

    async def _announce(self, kind: str) -> None:
        notice = casts.WorkerNotice(
            kind=kind, worker=self.worker_id, time_ms=_now_ms(), voices=self.voices, pid=os.getpid()
        )
        stream = casts.worker_stream(self.worker_id)
        await self.store.append(stream, [AppendRecord(casts.encode(notice))])

    async def run(self, stop: asyncio.Event, ready: threading.Event | None = None) -> None:
        """Work until `stop` is set, then finish the casts in hand and announce `stopped`."""
        tail = await self.store.check_tail(casts.JOBS_CURSOR)
        if tail:
            last = (await self.store.read(casts.JOBS_CURSOR, tail - 1)).records[0]
            self._cursor = casts.decode(last.body, casts.Cursor).offset
        await self._announce("ready")
        if ready is not None:
            ready.set()
        tasks: set[asyncio.Task[None]] = set()
        seq = self._cursor
        beat = time.monotonic()
        while not stop.is_set():
            batch = await self.store.read(casts.JOBS, seq, wait=0.1)
            for record in batch.records:
                job = casts.decode(record.body, casts.Job)
                task = asyncio.create_task(self._job(record.seq_num, job.id))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                seq = record.seq_num + 1
            if time.monotonic() - beat >= self.heartbeat_s:
                beat = time.monotonic()
                await self._announce("heartbeat")
        if tasks:
            await asyncio.wait(tasks)
        await self._announce("stopped")

    async def _job(self, seq: int, cast_id: str) -> None:
        if cast_id not in self._active:
            self._active.add(cast_id)
            try:
                await self._cast(cast_id)
            finally:
                self._active.discard(cast_id)
        self._finished.add(seq)
        advanced = self._cursor
        while advanced in self._finished:
            self._finished.discard(advanced)
            advanced += 1
        if advanced != self._cursor:
            self._cursor = advanced
            cursor = casts.Cursor(offset=advanced)
            await self.store.append(casts.JOBS_CURSOR, [AppendRecord(casts.encode(cursor))])

    async def _cast(self, cast_id: str) -> None:
        recipe_batch = await self.store.read(casts.catalog_stream(cast_id), 0, max_records=1)
        recipe = casts.decode(recipe_batch.records[0].body, casts.Recipe)
        stream = casts.cast_stream(cast_id)
        tail = await self.store.check_tail(stream)
        last = (await self.store.read(stream, tail - 1, max_records=1)).records[0]
        if casts.event_of(last) in (casts.Event.EOS, casts.Event.ERROR):
            return
        self.casts_started.append(cast_id)
        attempt = int(last.header(casts.H_ATTEMPT) or b"0") + 1
        match = re.search(r"\[chunks=(\d+)\]", recipe.text)
        chunks = int(match.group(1)) if match else self.chunks
        start = casts.Start(attempt=attempt, worker=self.worker_id, chunks=chunks)
        ack = await self.store.append(stream, [casts.start_record(start)], match_seq_num=tail)
        seq = ack.next_seq
        began = time.monotonic()
        for index in range(chunks):
            if "[fail-early]" in recipe.text or ("[fail-mid]" in recipe.text and index == 1):
                failure = casts.Failure(message="synthetic failure", attempts=attempt)
                record = casts.error_record(attempt, failure)
                await self.store.append(stream, [record], match_seq_num=seq)
                return
            await asyncio.sleep(self.chunk_delay)
            chunk = casts.AudioChunk(
                attempt=attempt,
                index=index,
                planned=chunks,
                offset_ms=index * CHUNK_MS,
                duration_ms=CHUNK_MS,
                text=f"chunk {index}",
                body=fake_records(recipe.format, chunks)[index],
            )
            ack = await self.store.append(stream, [casts.audio_record(chunk)], match_seq_num=seq)
            seq = ack.next_seq
        gen_ms = int((time.monotonic() - began) * 1000)
        audio_ms = chunks * CHUNK_MS
        eos = casts.Eos(chunks=chunks, audio_ms=audio_ms, gen_ms=gen_ms)
        await self.store.append(stream, [casts.eos_record(attempt, eos)], match_seq_num=seq)
        receipt = casts.Receipt(
            id=cast_id,
            attempt=attempt,
            worker=self.worker_id,
            chunks=chunks,
            audio_ms=audio_ms,
            gen_ms=gen_ms,
            xrt=audio_ms / max(gen_ms, 1),
        )
        await self.store.append(casts.PROGRESS_DONE, [AppendRecord(casts.encode(receipt))])


@contextlib.contextmanager
def running_fake_worker(store_dir: Path, **options: object) -> Iterator[FakeWorker]:
    """A fake worker on its own thread, event loop and store (so it keeps working while a
    test blocks its own loop); ready once this yields, stopped gracefully after."""
    holder: dict[str, object] = {}
    ready = threading.Event()

    async def body() -> None:
        store = await open_store(str(store_dir))
        worker = FakeWorker(store, **options)  # type: ignore[arg-type]
        stop = asyncio.Event()
        holder.update(worker=worker, stop=stop, loop=asyncio.get_running_loop())
        try:
            await worker.run(stop, ready)
        finally:
            await store.close()

    def main() -> None:
        try:
            asyncio.run(body())
        except BaseException as exc:
            holder["error"] = exc
            ready.set()

    thread = threading.Thread(target=main, name="fake-worker", daemon=True)
    thread.start()
    ready.wait(30)
    if "error" in holder:
        raise RuntimeError("the fake worker failed to start") from holder["error"]  # type: ignore[arg-type]
    try:
        yield holder["worker"]  # type: ignore[misc]
    finally:
        loop: asyncio.AbstractEventLoop = holder["loop"]  # type: ignore[assignment]
        loop.call_soon_threadsafe(holder["stop"].set)  # type: ignore[attr-defined]
        thread.join(30)
        if "error" in holder:
            raise RuntimeError("the fake worker failed") from holder["error"]  # type: ignore[arg-type]


async def _main(args: argparse.Namespace) -> None:
    store = await open_store(args.store)
    worker = FakeWorker(
        store,
        worker_id=args.worker_id,
        chunks=args.chunks,
        chunk_delay=args.chunk_delay,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await worker.run(stop)
    await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    parser.add_argument("--worker-id", default="fake-1")
    parser.add_argument("--chunks", type=int, default=3)
    parser.add_argument("--chunk-delay", type=float, default=0.02)
    asyncio.run(_main(parser.parse_args()))
