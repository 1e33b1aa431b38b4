"""Faults under a listener: kill -9, then SIGTERM, the worker of `speechd serve` while a
real-time listener is a minute into a cast; print what the listener heard.

    python -m loadtest.bench_faults --model-dir ~/.cache/speechd/kokoro-82m
        [--into 60] [--faults kill,term] [--device auto] [--threads N] [--dir DIR]

For each fault, a fresh `speechd serve` (the real model, its supervised worker, the embedded
store) on a fresh data folder: a listener streams a long cast (`POST /v1/audio/speech`, pcm)
and plays it in real time from its first byte (`loadtest._listener`); `--into` seconds later
the worker process gets SIGKILL (or SIGTERM, a graceful stop); the supervisor starts it again,
and the listener goes on until it has heard `--settle` seconds of audio made after the fault.
Printed per fault, next to the target (stall <= restart-to-ready + one chunk-time; chunks
made twice: 0, at most 1 for kill -9):

* stall: how long the listener stood still after the fault;
* restart-to-ready: the fault to the new worker process's `ready` notice (its model load and
  warm-up included), read from the store;
* chunk-time: the resumed attempt's `start` to its first audio (planning and one chunk);
* kept: the records of the playable sequence the new attempt kept (by reference);
* twice: chunks synthesized twice: durable chunks the new attempt did not keep, plus the
  chunk the worker was making when the fault hit (its last notice names it) if the new
  attempt made it again.

The load average before and after. Timing figures on a shared machine are void; the run takes
about two minutes per fault (a model load, `--into`, the restart, `--settle`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import msgspec

from speechd.casts.schema import (
    Event,
    Start,
    WorkerNotice,
    cast_stream,
    decode,
    event_of,
    worker_stream,
)
from speechd.durable import DurableError, Record, Store, open_store
from speechd.engine import parse_device

from ._listener import PCM_BYTES_PER_S, Listener
from ._servers import Server, start_speechd
from ._workload import VOICE, paragraph

__all__ = ["main"]

_SIGNALS = {"kill": (signal.SIGKILL, "kill -9"), "term": (signal.SIGTERM, "SIGTERM")}


@dataclass
class Outcome:
    fault: str
    stall_s: float
    restart_s: float | None
    chunk_s: float | None
    kept: int
    twice: int
    note: str = ""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


async def _records(store: Store, stream: str) -> list[Record]:
    out: list[Record] = []
    while True:
        batch = await store.read(stream, len(out))
        out.extend(batch.records)
        if len(out) >= batch.tail or not batch.records:
            return out


async def _notice(store: Store, worker_id: str) -> tuple[Record, WorkerNotice] | None:
    stream = worker_stream(worker_id)
    tail = await store.check_tail(stream)
    if not tail:
        return None
    record = (await store.read(stream, tail - 1, max_records=1)).records[0]
    return record, decode(record.body, WorkerNotice)


async def _worker(store: Store, within: float = 600.0) -> WorkerNotice:
    """The ready worker of this server (its id and pid, from its notices)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        for info in await store.list("workers/"):
            found = await _notice(store, info.name.removeprefix("workers/"))
            if found is not None and found[1].kind in ("ready", "heartbeat") and found[1].pid:
                return found[1]
        await asyncio.sleep(0.2)
    raise TimeoutError("no worker said it was ready")


async def _ready_after(store: Store, worker_id: str, after_ms: int, within: float) -> int | None:
    """When the worker's next life said `ready` (its stream starts over with it)."""
    deadline = time.monotonic() + within
    stream = worker_stream(worker_id)
    while time.monotonic() < deadline:
        with contextlib.suppress(DurableError, msgspec.DecodeError):  # it is starting over
            first = (await store.read(stream, 0, max_records=1)).records
            new = bool(first) and first[0].timestamp > after_ms
            if new and decode(first[0].body, WorkerNotice).kind == "ready":
                return first[0].timestamp
        await asyncio.sleep(0.1)
    return None


class _Listening:
    """A real-time listener on one streamed speech response, as a task."""

    def __init__(self, client: httpx.AsyncClient, url: str, text: str) -> None:
        self.listener = Listener(submitted=time.monotonic())
        self.cast_id: str | None = None
        self.error: str | None = None
        self.last_arrival = 0.0
        self.task = asyncio.create_task(self._run(client, url, text))

    async def _run(self, client: httpx.AsyncClient, url: str, text: str) -> None:
        body = {"model": "tts-1", "voice": VOICE, "input": text, "response_format": "pcm"}
        try:
            async with client.stream("POST", url + "/v1/audio/speech", json=body) as response:
                self.cast_id = response.headers.get("X-Cast-Id")
                if response.status_code != 200:
                    await response.aread()
                    self.error = f"http {response.status_code}: {response.text[:200]}"
                    return
                async for piece in response.aiter_raw():
                    now = time.monotonic()
                    self.listener.receive(now, len(piece) / PCM_BYTES_PER_S)
                    self.last_arrival = now
        except httpx.HTTPError as exc:
            self.error = type(exc).__name__
        self.listener.end(time.monotonic(), self.error)

    def position(self, now: float) -> float:
        """Seconds the listener has played by `now`."""
        first = self.listener.first
        if first is None:
            return 0.0
        return min(now - first - self.listener.stall_s, self.listener.received_s)

    def stall_now(self, now: float) -> float:
        """Its stall so far, counting a wait still going on."""
        first = self.listener.first
        if first is None:
            return 0.0
        due = first + self.listener.received_s + self.listener.stall_s
        return self.listener.stall_s + max(0.0, now - due)


async def run_fault(fault: str, args: argparse.Namespace, workdir: Path, text: str) -> Outcome:
    signum, label = _SIGNALS[fault]
    server: Server = start_speechd(
        f"faults-{fault}",
        policy="deadline",
        model_dir=args.model_dir,
        device=args.device,
        threads=args.threads,
        workdir=workdir,
    )
    try:
        server.wait_ready(timeout=600)
        assert server.data_dir is not None
        store = await open_store(server.data_dir)
        try:
            return await _fault(fault, signum, label, args, server, store, text)
        finally:
            await store.close()
    finally:
        server.stop()


async def _fault(
    fault: str,
    signum: int,
    label: str,
    args: argparse.Namespace,
    server: Server,
    store: Store,
    text: str,
) -> Outcome:
    worker = await _worker(store)
    timeout = httpx.Timeout(10.0, read=900.0)
    async with httpx.AsyncClient(timeout=timeout) as client:
        listening = _Listening(client, server.url, text)
        while listening.position(time.monotonic()) < args.into:
            if listening.task.done():
                return Outcome(label, 0.0, None, None, 0, 0, f"ended early: {listening.error}")
            await asyncio.sleep(0.05)
        cast_id = listening.cast_id
        assert cast_id is not None
        before = await _notice(store, worker.worker)
        in_flight = before[1].chunk if before and before[1].cast == cast_id else -1
        stall_before = listening.stall_now(time.monotonic())
        fault_ms = _now_ms()
        os.kill(worker.pid, signum)
        # Until it has heard `settle` seconds of audio made after the fault (or the end).
        heard = listening.listener.received_s
        deadline = time.monotonic() + 900
        while not listening.task.done() and time.monotonic() < deadline:
            if listening.listener.received_s - heard >= args.settle:
                break
            await asyncio.sleep(0.1)
        stall = listening.stall_now(time.monotonic()) - stall_before
        listening.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listening.task
    ready_ms = await _ready_after(store, worker.worker, fault_ms, within=5.0)
    stream = await _records(store, cast_stream(cast_id))
    found = _resumed_start(stream, fault_ms)
    if found is None:
        return Outcome(label, stall, None, None, 0, 0, "no new attempt after the fault")
    start_record, start, before_len = found
    first_new = next(
        (r for r in stream if r.seq_num > start_record.seq_num and event_of(r) == Event.AUDIO),
        None,
    )
    chunk_s = (first_new.timestamp - start_record.timestamp) / 1000 if first_new else None
    restart_s = (ready_ms - fault_ms) / 1000 if ready_ms is not None else None
    twice = before_len - start.keep + (1 if in_flight >= 0 and start.keep <= in_flight else 0)
    return Outcome(label, stall, restart_s, chunk_s, start.keep, twice)


def _resumed_start(stream: list[Record], after_ms: int) -> tuple[Record, Start, int] | None:
    """The first `start` after `after_ms`, and the playable sequence's length before it."""
    length = 0
    for record in stream:
        event = event_of(record)
        if event == Event.START:
            start = decode(record.body, Start)
            if record.timestamp > after_ms:
                return record, start, length
            length = start.keep
        elif event == Event.AUDIO:
            length += 1
    return None


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument(
        "--device", default="auto", type=parse_device, help="auto, cpu, cuda or cuda:N (auto)"
    )
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--into", type=float, default=60.0, help="seconds into the cast")
    parser.add_argument("--settle", type=float, default=5.0, help="audio heard after, s")
    parser.add_argument("--faults", default="kill,term", help="kill, term or both")
    parser.add_argument("--dir", default=None, help="where the data folders go")
    args = parser.parse_args(argv)
    faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    unknown = set(faults) - set(_SIGNALS)
    if unknown:
        parser.error(f"unknown faults {sorted(unknown)}: use kill, term")
    # Long enough that the cast still runs well past the fault: ~40 sentences, ~3 minutes.
    text = paragraph(40, 0)
    print(
        f"speechd fault benchmark: the real model ({args.device}), a real-time listener "
        f"{args.into:.0f} s into a cast of {len(text)} characters"
    )
    print(f"   load average {os.getloadavg()[0]:.2f}", flush=True)
    outcomes = []
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="speechd-faults-") as tmp:
        for fault in faults:
            began = time.monotonic()
            outcomes.append(asyncio.run(run_fault(fault, args, Path(tmp), text)))
            print(f"   {_SIGNALS[fault][1]}: done in {time.monotonic() - began:.0f} s", flush=True)
    print(
        f"\n   {'fault':<9} {'stall':>8} {'restart-to-ready':>17} {'chunk-time':>11} "
        f"{'target':>10} {'ratio':>6} {'kept':>5} {'twice':>6}"
    )
    for o in outcomes:
        target = None if o.restart_s is None or o.chunk_s is None else o.restart_s + o.chunk_s
        ratio = "-" if not target else f"{o.stall_s / target:.2f}"
        print(
            f"   {o.fault:<9} {_fmt(o.stall_s):>8} {_fmt(o.restart_s):>17} {_fmt(o.chunk_s):>11} "
            f"{'<= ' + _fmt(target) if target else '-':>10} {ratio:>6} {o.kept:>5} {o.twice:>6}"
            + (f"   ({o.note})" if o.note else "")
        )
    print(
        "\n   targets: stall <= restart-to-ready + chunk-time (ratio <= 1); twice 0 "
        "(at most 1 for kill -9)"
    )
    print(f"   load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
