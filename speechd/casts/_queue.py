"""The line of casts in `jobs`, read from the store (torch-free; the api uses it).

A job's cast is *waiting* while its stream holds only `meta` (no worker has started it),
*active* once started, and *done* once its stream ends in `eos`, or in `error` written after
the job (a failed cast submitted again waits to be made again: its stream ends in `retry`, or
in the `error` before its new job), or is gone. Workers admit waiting casts in `jobs` order,
so a cast's place in line is the number of distinct waiting casts whose jobs come before its
own. A background job (a book's chapter, made with the device's spare time only) is no place
in line: it neither counts against the queue limit nor stands ahead of anyone.

`tail(jobs) - cursor` is no measure of that: the cursor only moves over a contiguous run of
finished jobs, so one long cast at the head of the line keeps every short cast finished behind
it on the books. `QueueLine` remembers instead what it learnt, per api process:

* jobs below the committed cursor are finished; the jobs above it are read once each, in
  order, at most `scan` per refresh, and each distinct cast becomes an entry;
* an entry is looked at again (one `check_tail`; a read of its last record only when the tail
  moved) at most `checks` entries per refresh, those never looked at first, then the stalest;
  a done entry is forgotten for good;
* the cursor and the new jobs are read on every call (two reads and one); looking at entries
  runs at most every `ttl_s` (concurrent callers share it).

So every call costs a bounded number of store reads whatever the length of `jobs`, and the
depth is exact once the line has been read: the entries waiting or active, plus the jobs not
read yet (counted as waiting until they are). The estimated start of a waiting cast comes from
what is measured: the casts being made run at their listeners' pace (one audio second per
second), or slower when the ready workers' capacity (audio seconds per compute second, from
the receipts in `progress/done`) is shared by more of them; each cast ahead takes the first
slot that frees, for its own audio (from its text length and the audio per character of the
casts seen to finish).
"""

from __future__ import annotations

import asyncio
import heapq
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import msgspec

from speechd.durable import SeqOutOfRange, Store

from ._records import Cursor, Eos, Event, Job, Meta, Receipt, audio_chunk, decode, event_of
from ._streams import JOBS, JOBS_CURSOR, PROGRESS_DONE, cast_stream

__all__ = ["QueueLine", "QueuePlace", "committed_offset", "queue_depth", "queue_position"]

_PAGE = 1000
_SCAN = 1000  # jobs read per refresh
_CHECKS = 256  # entries looked at per refresh
_LOOKUPS = 32  # of them at once
_MAX_ENTRIES = 10_000  # unfinished casts remembered (admission refuses long before)
_RECEIPTS = 32  # recent receipts kept per worker
_CURSOR_TRIES = 8  # reads of the cursor's last record, each raced by another commit
_PRIOR_AUDIO_PER_CHAR = 0.065  # seconds at speed 1, as the worker's prior
_WAITING, _ACTIVE, _DONE, _UNKNOWN = "waiting", "active", "done", "unknown"


async def committed_offset(store: Store) -> int:
    """The committed read offset into `jobs` (every job below it is finished)."""
    for _ in range(_CURSOR_TRIES):
        tail = await store.check_tail(JOBS_CURSOR)
        if tail == 0:
            return 0
        try:
            batch = await store.read(JOBS_CURSOR, tail - 1, max_records=1)
        except SeqOutOfRange:  # another commit trimmed it between the two reads: look again
            continue
        if batch.records:
            return decode(batch.records[0].body, Cursor).offset
    return 0  # the cursor kept moving under us: nothing is known to be finished


class QueuePlace(msgspec.Struct, frozen=True):
    """Where a waiting cast stands in line."""

    ahead: int
    """Waiting casts ahead of it (0: it starts next)."""
    starts_in_s: float | None
    """Estimated seconds until it starts; None when nothing measured says (no ready worker)."""


@dataclass(eq=False)
class _Entry:
    offset: int  # of the cast's first unfinished job
    cast: str
    job_ms: int  # when its latest job was appended
    state: str = _UNKNOWN
    tail: int = -1  # the cast stream's tail when last looked at
    checked: float = -math.inf  # when (our clock)
    chars: int = 0  # from its meta, once read
    speed: float = 1.0
    remaining_s: float | None = None  # audio still to make, estimated (active casts)


class QueueLine:
    """The line of unfinished casts, learnt a little at a time (see the module docstring).

    One per api process, over its store; safe to share between concurrent requests.
    """

    def __init__(
        self,
        store: Store,
        *,
        ttl_s: float = 0.5,
        scan: int = _SCAN,
        checks: int = _CHECKS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._ttl_s = ttl_s
        self._scan = scan
        self._checks = checks
        self._clock = clock
        self._lock = asyncio.Lock()
        self._refreshed = -math.inf
        self._committed = 0
        self._scanned = 0  # jobs below this offset were read
        self._jobs_tail = 0  # the tail of `jobs` when last read
        self._entries: dict[int, _Entry] = {}  # by offset, in line order
        self._by_cast: dict[str, _Entry] = {}
        self._receipts_next = -1  # -1: not read yet
        self._xrt: dict[str, deque[float]] = {}
        self._audio_chars = [0.0, 0]  # audio seconds (at speed 1) and characters, of casts done

    # -- what callers ask -----------------------------------------------------------------

    async def depth(self) -> int:
        """Casts waiting or being made, plus jobs not read yet (each a cast, until read)."""
        await self.refresh()
        unread = max(0, self._jobs_tail - self._scanned)
        return unread + sum(1 for e in self._entries.values() if e.state != _DONE)

    async def unfinished(self, *, limit: int) -> list[str]:
        """Ids of the casts not known to be finished (waiting, being made, or not looked at
        yet), in line order, as far as `jobs` was read."""
        await self.refresh()
        return [e.cast for e in self._entries.values() if e.state != _DONE][:limit]

    async def place(self, cast_id: str, *, workers: Sequence[str] = ()) -> QueuePlace | None:
        """Where `cast_id` stands if it waits (None: not waiting, or not read yet), with its
        start estimated from the capacity of the ready `workers` (none: no estimate)."""
        await self.refresh()
        entry = self._by_cast.get(cast_id)
        if entry is None or entry.state != _WAITING:
            return None
        ahead = [e for e in self._entries.values() if e.offset < entry.offset]
        waiting = [self._audio_s(e) for e in ahead if e.state == _WAITING]
        if not workers:
            return QueuePlace(len(waiting), None)
        active = [e for e in self._entries.values() if e.state == _ACTIVE]
        remaining = [e.remaining_s if e.remaining_s is not None else 0.0 for e in active]
        capacity = self._capacity(workers)
        rate = 1.0 if capacity is None else min(1.0, capacity / max(len(active), 1))
        return QueuePlace(len(waiting), round(_first_free(remaining, waiting, rate), 1))

    async def making_s(self, chars: int, speed: float, *, workers: Sequence[str]) -> float | None:
        """Seconds the ready `workers` should take to make `chars` characters at `speed`, at
        their measured speed with the device to themselves (None: nothing measured yet)."""
        await self.refresh()
        capacity = self._capacity(workers) if workers else None
        if not capacity:
            return None
        audio, done = self._audio_chars
        per_char = audio / done if done else _PRIOR_AUDIO_PER_CHAR
        return chars * per_char / max(speed, 0.01) / capacity

    # -- learning -------------------------------------------------------------------------

    async def refresh(self, *, full: bool = False) -> None:
        """Learn what changed (at most once per `ttl_s`); `full`: read and look at everything
        now, whatever the budgets (for one-off counts, never per request)."""
        async with self._lock:
            committed = await committed_offset(self._store)  # always: it is two cheap reads
            if committed > self._committed:
                for offset in [o for o in self._entries if o < committed]:
                    self._forget(self._entries[offset])
                self._committed = committed
            self._scanned = max(self._scanned, committed)
            await self._read_jobs(math.inf if full else self._scan)
            if not full and self._clock() - self._refreshed < self._ttl_s:
                return
            await self._look(math.inf if full else self._checks)
            await self._read_receipts()
            self._refreshed = self._clock()

    async def _read_jobs(self, budget: float) -> None:
        if len(self._by_cast) >= _MAX_ENTRIES:  # remember no more; count the rest unread
            self._jobs_tail = await self._store.check_tail(JOBS)
            return
        while budget > 0 and len(self._by_cast) < _MAX_ENTRIES:
            try:
                batch = await self._store.read(
                    JOBS, self._scanned, max_records=int(min(_PAGE, budget))
                )
            except SeqOutOfRange as exc:
                if exc.seq_num < exc.first:  # trimmed below a commit newer than ours
                    self._scanned = exc.first  # (finished jobs; the next refresh forgets them)
                    continue
                self._scanned = min(self._committed, exc.tail)  # the store was emptied
                self._jobs_tail = exc.tail
                return
            self._jobs_tail = batch.tail
            for record in batch.records:
                try:
                    job = decode(record.body, Job)
                except msgspec.DecodeError:  # a book's cancel, or not a job
                    continue
                if job.background:  # a book's chapter: spare time only, never in the line
                    continue
                cast_id = job.id
                known = self._by_cast.get(cast_id)
                if known is not None:  # a duplicate: the first job's place holds
                    known.job_ms = max(known.job_ms, record.timestamp)
                    continue
                entry = _Entry(record.seq_num, cast_id, record.timestamp)
                self._entries[entry.offset] = entry
                self._by_cast[cast_id] = entry
            if not batch.records:
                return
            self._scanned = batch.records[-1].seq_num + 1
            budget -= len(batch.records)
            if self._scanned >= batch.tail:
                return

    async def _look(self, budget: float) -> None:
        due = list(self._entries.values())
        if not math.isinf(budget):  # those never looked at first, then the stalest
            due = heapq.nsmallest(int(budget), due, key=lambda e: e.checked)
        limit = asyncio.Semaphore(_LOOKUPS)

        async def look(entry: _Entry) -> None:
            async with limit:
                await self._check(entry)

        await asyncio.gather(*(look(e) for e in due))
        for entry in due:
            if entry.state == _DONE:
                self._forget(entry)

    async def _check(self, entry: _Entry) -> None:
        entry.checked = self._clock()
        stream = cast_stream(entry.cast)
        tail = await self._store.check_tail(stream)
        if tail == entry.tail:
            return
        if tail == 0:  # gone (retention)
            entry.state = _DONE
            return
        try:
            if entry.tail < 0:
                first = (await self._store.read(stream, 0, max_records=1)).records
                if first and event_of(first[0]) == Event.META:
                    meta = decode(first[0].body, Meta)
                    entry.chars, entry.speed = meta.text_chars, meta.speed
            last = (await self._store.read(stream, tail - 1, max_records=1)).records
        except SeqOutOfRange:  # trimmed or removed meanwhile: look again next time
            return
        entry.tail = tail
        if tail == 1 or not last:
            entry.state = _WAITING
            return
        record = last[0]
        event = event_of(record)
        if event == Event.EOS:
            entry.state = _DONE
            if entry.chars:
                made = decode(record.body, Eos).audio_ms / 1000 * entry.speed
                self._audio_chars[0] += made
                self._audio_chars[1] += entry.chars
        elif event == Event.ERROR:
            entry.state = _DONE if record.timestamp >= entry.job_ms else _WAITING
        elif event == Event.RETRY:  # a failed cast asked for again: it waits for an attempt
            entry.state = _WAITING
        elif event == Event.AUDIO:
            entry.state = _ACTIVE
            chunk = audio_chunk(record)
            made = (chunk.offset_ms + chunk.duration_ms) / 1000
            entry.remaining_s = made * chunk.planned / (chunk.index + 1) - made
        else:  # started, no audio yet
            entry.state = _ACTIVE
            entry.remaining_s = self._audio_s(entry)

    def _forget(self, entry: _Entry) -> None:
        self._entries.pop(entry.offset, None)
        if self._by_cast.get(entry.cast) is entry:
            del self._by_cast[entry.cast]

    async def _read_receipts(self) -> None:
        if self._receipts_next < 0:  # the recent past is enough to measure capacity
            tail = await self._store.check_tail(PROGRESS_DONE)
            self._receipts_next = max(0, tail - _RECEIPTS * 2)
        try:
            batch = await self._store.read(PROGRESS_DONE, self._receipts_next, max_records=_PAGE)
        except SeqOutOfRange as exc:  # trimmed (the worker keeps a window), or emptied
            self._receipts_next = exc.first if exc.seq_num < exc.first else -1
            return
        for record in batch.records:
            try:
                receipt = decode(record.body, Receipt)
            except msgspec.DecodeError:
                continue
            if receipt.xrt > 0:
                kept = self._xrt.setdefault(receipt.worker, deque(maxlen=_RECEIPTS))
                kept.append(receipt.xrt)
        if batch.records:
            self._receipts_next = batch.records[-1].seq_num + 1

    # -- estimates ------------------------------------------------------------------------

    def _audio_s(self, entry: _Entry) -> float:
        audio, chars = self._audio_chars
        per_char = audio / chars if chars else _PRIOR_AUDIO_PER_CHAR
        return entry.chars * per_char / max(entry.speed, 0.01)

    def _capacity(self, workers: Sequence[str]) -> float | None:
        """Audio seconds the ready workers make per second, each its recent receipts' mean
        (a worker with none counts as the mean of all); None when nothing was measured."""
        every = [x for kept in self._xrt.values() for x in kept]
        if not every:
            return None
        overall = sum(every) / len(every)
        total = 0.0
        for worker in workers:
            kept = self._xrt.get(worker)
            total += sum(kept) / len(kept) if kept else overall
        return total


def _first_free(remaining: list[float], ahead: list[float], rate: float) -> float:
    """When a slot frees for the next cast: the active casts hold one slot each until their
    remaining audio is made at `rate`, and each waiting cast ahead takes the first slot that
    frees, for its own audio."""
    slots = [r / rate for r in remaining] or [0.0]
    heapq.heapify(slots)
    for audio in ahead:
        free = heapq.heappop(slots)
        heapq.heappush(slots, free + audio / rate)
    return slots[0]


async def queue_depth(store: Store) -> int:
    """Casts waiting in line or being made (one full read of the line: for one-off counts;
    the api keeps a `QueueLine`)."""
    line = QueueLine(store)
    await line.refresh(full=True)
    return await line.depth()


async def queue_position(store: Store, cast_id: str) -> int | None:
    """How many waiting casts are ahead of `cast_id` (0: it starts next), or None when it is
    not waiting (started, finished, unknown, or its job is not in `jobs`)."""
    line = QueueLine(store)
    await line.refresh(full=True)
    place = await line.place(cast_id)
    return place.ahead if place is not None else None
