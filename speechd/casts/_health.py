"""Worker health through the store, so it works for remote workers as well as local ones.

Each worker owns `workers/<id>`. A worker process first appends `loading` (every heartbeat
period while the model loads) and, if the model cannot be loaded, `unavailable` with the error;
a process that retries after a failure carries that error in its `loading` notices. Once
loaded, the worker clears the stream and appends `ready` (voices, the languages it cannot
speak, device, pid, heartbeat period) as seq 0, then a `heartbeat` every period and as each
chunk starts, and `stopped` on a clean exit. After `ROTATE_NOTICES` records it starts the
stream over with `ready` (a reader between the two sees no such worker for that instant). A
worker is ready while its last notice is ready/heartbeat and younger than `FRESH_HEARTBEATS`
periods.

`worker_health` reads all of that in one pass: the ready workers, and what the newest of the
others last said (so the api can tell a caller why no worker is ready). `config/voices` keeps
the `ready` notice of the last worker to get ready whose voices differed from the one before,
so the voice list survives while no worker is ready. Torch-free: the api reads all of this for
/readyz, the voices and its 503s.
"""

from __future__ import annotations

import msgspec

from speechd.durable import AppendRecord, Record, SeqOutOfRange, Store
from speechd.errors import ModelUnavailable, SpeechdError, Unavailable

from ._records import WorkerNotice, decode, encode
from ._streams import KNOWN_VOICES, WORKERS_PREFIX, worker_stream

__all__ = [
    "FRESH_HEARTBEATS",
    "HEARTBEAT",
    "IDLE",
    "LOADING",
    "READY",
    "STOPPED",
    "UNAVAILABLE",
    "WAKING",
    "WorkerHealth",
    "known_voices",
    "last_notice",
    "ready_workers",
    "remember_voices",
    "worker_alive",
    "worker_health",
]

FRESH_HEARTBEATS = 3
READY = "ready"
HEARTBEAT = "heartbeat"
STOPPED = "stopped"
LOADING = "loading"
UNAVAILABLE = "unavailable"
#: Where a ready worker's model is (`WorkerNotice.state`; "" is held).
IDLE = "idle"
WAKING = "waking"
_LIVE = (READY, HEARTBEAT)
_KNOWN_VOICES_KEPT = 64  # records in `config/voices` before it starts over


class WorkerHealth(msgspec.Struct, frozen=True):
    """The workers as the store tells them, at one moment."""

    ready: list[WorkerNotice]
    """The workers ready now, idle ones (their model given back) included: their `ready`
    notice, with the time, model state, device, fallback and readings of their latest one."""
    last: WorkerNotice | None = None
    """Of the workers not ready, the newest notice (what the last one heard from said)."""
    last_fresh: bool = False
    """Whether that worker is still heard from: it beats within its heartbeat period."""
    last_age_s: float = 0.0
    """How long ago that notice was written."""

    @property
    def model(self) -> str:
        """Where the ready workers' model is, taken together: "resident" when any holds it,
        else "waking" when any is taking it again, else "idle" ("" without a ready worker)."""
        states = {w.state for w in self.ready}
        if not states:
            return ""
        if "" in states or not states <= {IDLE, WAKING}:
            return "resident"
        return WAKING if WAKING in states else IDLE

    def wake_in_ms(self, now_ms: int) -> int | None:
        """While no ready worker holds its model: how soon the first of them should hold it
        again, from its measured load time (less what has passed of a wake under way); None
        when one holds it, or no load time is known."""
        if self.model not in (IDLE, WAKING):
            return None
        soonest: int | None = None
        for worker in self.ready:
            model = worker.telemetry.model if worker.telemetry is not None else None
            if model is None or model.load_s is None:
                continue
            left = round(model.load_s * 1000)
            if worker.state == WAKING:
                left = max(0, left - max(0, now_ms - model.since_ms))
            soonest = left if soonest is None else min(soonest, left)
        return soonest

    def unavailable(self) -> SpeechdError | None:
        """Why no worker is ready, as the error to answer with (None: one is ready).

        `ModelUnavailable` when the last worker heard from failed to load the model (also
        while it tries again), with its error; `Unavailable` otherwise (loading, stopped,
        silent, or none ever started), saying which.
        """
        if self.ready:
            return None
        last = self.last
        if last is None:
            return Unavailable(
                "No worker is ready: none has started (`speechd serve` runs one; "
                "`speechd worker` runs one beside `speechd api`)."
            )
        if last.error:
            again = (
                " (a worker is trying again)" if last.kind == LOADING and self.last_fresh else ""
            )
            return ModelUnavailable(f"The model is unavailable: {last.error.rstrip('.')}{again}.")
        if last.kind == LOADING and self.last_fresh:
            return Unavailable("No worker is ready yet: the model is loading.")
        if last.kind == STOPPED:
            return Unavailable(f"No worker is ready: the last one stopped {self._ago()}.")
        return Unavailable(f"No worker is ready: the last one went silent {self._ago()}.")

    def _ago(self) -> str:
        age = max(self.last_age_s, 0.0)
        return f"{age:.0f} s ago" if age < 120 else f"{age / 60:.0f} min ago"


def _young(record: Record, notice: WorkerNotice, now_ms: int) -> bool:
    return now_ms - record.timestamp < FRESH_HEARTBEATS * max(notice.heartbeat_ms, 1)


def _fresh(record: Record, notice: WorkerNotice, now_ms: int) -> bool:
    return notice.kind in _LIVE and _young(record, notice, now_ms)


async def _notice_at(store: Store, stream: str, seq: int) -> tuple[Record, WorkerNotice] | None:
    try:
        batch = await store.read(stream, seq, max_records=1)
    except SeqOutOfRange:  # the worker started its stream over just now
        return None
    if not batch.records:
        return None
    record = batch.records[0]
    try:
        return record, decode(record.body, WorkerNotice)
    except msgspec.DecodeError:
        return None


async def last_notice(store: Store, worker_id: str) -> tuple[Record, WorkerNotice] | None:
    """The last notice `worker_id` wrote (with its record), if any."""
    stream = worker_stream(worker_id)
    tail = await store.check_tail(stream)
    return await _notice_at(store, stream, tail - 1) if tail else None


async def worker_alive(store: Store, worker_id: str, *, now_ms: int) -> bool:
    """Whether `worker_id` announced itself ready or beat its heart lately."""
    found = await last_notice(store, worker_id)
    return found is not None and _fresh(*found, now_ms)


async def worker_health(store: Store, *, now_ms: int) -> WorkerHealth:
    """The ready workers and, among the others, the newest notice: one read of each worker's
    last record (and of the first, for a ready one)."""
    ready: list[WorkerNotice] = []
    newest: tuple[Record, WorkerNotice] | None = None
    for info in await store.list(WORKERS_PREFIX, limit=10_000):
        if info.next_seq == 0:
            continue
        last = await _notice_at(store, info.name, info.next_seq - 1)
        if last is None:
            continue
        if _fresh(*last, now_ms):
            first = last if info.next_seq == 1 else await _notice_at(store, info.name, 0)
            if first is not None and first[1].kind == READY:
                ready.append(_as_now(first[1], last[1]))
                continue
        if newest is None or last[0].timestamp > newest[0].timestamp:
            newest = last
    if newest is None:
        return WorkerHealth(ready)
    age_s = (now_ms - newest[0].timestamp) / 1000
    return WorkerHealth(ready, newest[1], _young(*newest, now_ms), age_s)


def _as_now(ready: WorkerNotice, latest: WorkerNotice) -> WorkerNotice:
    """A ready worker's `ready` notice (its voices), with what its latest one says now: the
    time, where its model is (`state`), its device and why it left the one asked for, its
    batch size, its decoder graph, its readings."""
    return msgspec.structs.replace(
        ready,
        time_ms=latest.time_ms,
        state=latest.state,
        device=latest.device or ready.device,
        fallback=latest.fallback,
        max_batch=latest.max_batch or ready.max_batch,
        graph=latest.graph or ready.graph,
        telemetry=latest.telemetry if latest.telemetry is not None else ready.telemetry,
    )


async def ready_workers(store: Store, *, now_ms: int) -> list[WorkerNotice]:
    """The workers that are ready now: their `ready` notice (voices, device, pid), with
    `time_ms` of their latest heartbeat. Stopped, loading and silent workers are left out."""
    return (await worker_health(store, now_ms=now_ms)).ready


async def known_voices(store: Store) -> WorkerNotice | None:
    """The `ready` notice `remember_voices` kept last, if any."""
    tail = await store.check_tail(KNOWN_VOICES)
    found = await _notice_at(store, KNOWN_VOICES, tail - 1) if tail else None
    return found[1] if found else None


async def remember_voices(store: Store, notice: WorkerNotice) -> None:
    """Keep `notice` (a `ready` one) in `config/voices` unless it lists the same voices and
    unspeakable languages as the one kept last."""
    kept = await known_voices(store)
    if kept is not None and (kept.voices, kept.unspeakable) == (notice.voices, notice.unspeakable):
        return
    if await store.check_tail(KNOWN_VOICES) >= _KNOWN_VOICES_KEPT:
        await store.delete(KNOWN_VOICES)
    await store.append(KNOWN_VOICES, [AppendRecord(encode(notice))])
