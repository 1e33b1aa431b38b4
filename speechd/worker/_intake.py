"""Job intake and the committed cursor: `jobs` read from the cursor on, in order; the cursor
moved only over a contiguous run of finished jobs (see docs/design/index.md#the-worker).

`Intake.run` long-polls `jobs` from the read offset and queues each job; the worker takes them
from the head of the line (`pending`). Background jobs (a book's chapters, `Job.background`)
wait in a line of their own (`background`), which the worker takes from only when nobody waits
in `pending` (`_admission`). A book's cancel (`CancelBook`) is read in the same order: the
background jobs of that book read before it are finished at once, and the cancel is kept
(`cancels`, for the loop to stop the book's chapters being made, and `cancelled` for a job of
the book met again later: one deferred to another worker, say). Finishing a job (its cast
ended, was skipped or went to `jobs/dead`) moves the watermark (`Watermark`: the first job not
finished), and `commit` appends the new offset to `jobs/_cursor` (never backwards, even when
other workers commit too). After a crash the next life reads from the committed offset again;
jobs of casts already ended are finished at once.

**Trim.** Every reader of `jobs` reads only at or above the committed cursor (the workers'
intakes, from the offset they opened at; the api's `QueueLine`, for place in line), and a
job below it is finished for everyone, whichever worker ended it. So after a commit the
worker trims `jobs` below the committed offset and `jobs/_cursor` below its last record
(`committed_offset` reads only that one). A reader that finds its offset trimmed away (a
worker whose intake lagged behind another's commits) resumes at the stream's first seq:
what it skipped was finished. A trim costs one store operation and is O(1) in both stores,
so it runs only once `TRIM_EVERY` jobs or cursor records could go, or when this worker's
line is empty: a handful of operations per `TRIM_EVERY` casts, never a loop.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections import OrderedDict, deque

import msgspec

from speechd.casts import committed_offset
from speechd.casts.schema import JOBS, JOBS_CURSOR, CancelBook, Cursor, Job, decode, encode
from speechd.durable import AppendRecord, SeqMismatch, SeqOutOfRange, Store

from ._cast import JobRef

__all__ = ["TRIM_EVERY", "Intake"]

log = logging.getLogger("speechd.worker")

_JOBS_PAGE = 256
_MAX_PENDING = 10_000
TRIM_EVERY = 64  # records that could go before a trim is worth its store operation
_CANCELS_KEPT = 1024  # books whose cancel is remembered (the latest ones)


class Watermark:
    """Offsets of `jobs` read from `base` on, each open until `finish`ed.

    `committed` is the first offset not yet finished: every job below it is finished, so a
    worker restarting from it loses nothing. A short job 10 finishing before a long job 7
    leaves `committed` at 7 until 7 finishes too.
    """

    def __init__(self, base: int = 0) -> None:
        self._next = base  # one past the highest offset read
        self._open: set[int] = set()
        self._heap: list[int] = []  # open offsets, lazily pruned of finished ones

    @property
    def committed(self) -> int:
        while self._heap and self._heap[0] not in self._open:
            heapq.heappop(self._heap)
        return self._heap[0] if self._heap else self._next

    def add(self, offset: int) -> None:
        """Open the job at `offset`; offsets arrive in order, each once, with no holes."""
        if offset != self._next:
            raise ValueError(f"job offset {offset} is not the next one ({self._next})")
        self._next = offset + 1
        self._open.add(offset)
        heapq.heappush(self._heap, offset)

    def skip_to(self, offset: int) -> None:
        """Jump the read position to `offset`: the offsets between were never read here
        because they are finished already (trimmed from `jobs` below the committed cursor).
        Jobs read and still open stay open."""
        self._next = max(self._next, offset)

    def finish(self, offset: int) -> None:
        """Mark the job at `offset` finished (again is harmless)."""
        self._open.discard(offset)


class Intake:
    """The line of jobs read from `jobs`, and the cursor over the finished ones."""

    def __init__(self, store: Store, wake: asyncio.Event) -> None:
        self._store = store
        self._wake = wake  # set when jobs were queued
        self.pending: deque[JobRef] = deque()
        self.background: deque[JobRef] = deque()
        """Background jobs (books' chapters), in line order, taken only when `pending` is
        empty."""
        self.cancels: list[tuple[str, int]] = []
        """Books cancelled since the loop last looked: (book, the cancel's offset)."""
        self._cancelled: OrderedDict[str, int] = OrderedDict()  # book -> its latest cancel
        self._watermark = Watermark()
        self.committed = 0
        self._cursor_tail = 0
        self._read_offset = 0
        self._jobs_first = 0  # what this worker knows of each stream's first seq (a lower
        self._cursor_first = 0  # guess only costs a trim that changes nothing)

    async def open(self) -> int:
        """Read the committed cursor: jobs are read from there. Returns it."""
        self._cursor_tail = await self._store.check_tail(JOBS_CURSOR)
        self.committed = await committed_offset(self._store)
        self._watermark = Watermark(self.committed)
        self._read_offset = self.committed
        return self.committed

    async def run(self) -> None:
        """Long-poll `jobs` from the read offset; queue each job in order (forever)."""
        while True:
            if len(self.pending) >= _MAX_PENDING:
                await asyncio.sleep(0.5)
                continue
            try:
                batch = await self._store.read(
                    JOBS, self._read_offset, max_records=_JOBS_PAGE, wait=30
                )
            except SeqOutOfRange as exc:
                if exc.seq_num >= exc.first:  # past the tail: `jobs` is not what we read
                    raise
                # Trimmed below another worker's commit: every job skipped is finished.
                log.debug("jobs trimmed to %d; reading on from there", exc.first)
                self._watermark.skip_to(exc.first)
                self._read_offset = exc.first
                continue
            for record in batch.records:
                self._watermark.add(record.seq_num)
                try:
                    job = decode(record.body, Job)
                except msgspec.DecodeError:
                    self._watermark.finish(record.seq_num)
                    try:
                        self._cancel(decode(record.body, CancelBook).cancel_book, record.seq_num)
                    except msgspec.DecodeError:
                        log.warning("jobs[%d] is not a job; skipped", record.seq_num)
                    continue
                ref = JobRef(record.seq_num, job.id, job.at_once, job.background, job.book)
                (self.background if job.background else self.pending).append(ref)
            if batch.records:
                self._read_offset = batch.records[-1].seq_num + 1
                self._wake.set()

    def _cancel(self, book: str, offset: int) -> None:
        """Book `book` is cancelled at `offset`: its background jobs in line go (finished at
        the next commit), and the loop is told (`cancels`)."""
        self._cancelled[book] = offset
        self._cancelled.move_to_end(book)
        while len(self._cancelled) > _CANCELS_KEPT:
            self._cancelled.popitem(last=False)
        kept: deque[JobRef] = deque()
        for job in self.background:
            if self.cancelled(job):
                self._watermark.finish(job.offset)
            else:
                kept.append(job)
        self.background = kept
        self.cancels.append((book, offset))
        log.info("a book was cancelled: its chapters waiting in the background are skipped")

    def cancelled(self, job: JobRef) -> bool:
        """Whether `job` is a background job of a book cancelled after it."""
        return job.background and self._cancelled.get(job.book, -1) > job.offset

    def take_cancels(self) -> list[tuple[str, int]]:
        """The books cancelled since the last call, each with its cancel's offset."""
        taken, self.cancels = self.cancels, []
        return taken

    async def finish(self, job: JobRef) -> None:
        """`job` needs nothing more: let the cursor pass it."""
        self._watermark.finish(job.offset)
        await self.commit()

    async def commit(self) -> None:
        """Move the committed cursor up to the watermark (never backwards)."""
        target = self._watermark.committed
        while target > self.committed:
            try:
                await self._store.append(
                    JOBS_CURSOR,
                    [AppendRecord(encode(Cursor(target)))],
                    match_seq_num=self._cursor_tail,
                )
            except SeqMismatch as exc:
                self._cursor_tail = exc.next_seq
                self.committed = max(self.committed, await committed_offset(self._store))
                continue
            self._cursor_tail += 1
            self.committed = target
        await self._trim()

    async def _trim(self) -> None:
        """Drop what every reader is done with (see the module docstring): at most two store
        operations, and none unless `TRIM_EVERY` records could go or the line is empty."""
        idle = not self.pending and not self.background
        behind = self.committed - self._jobs_first
        if behind > 0 and (idle or behind >= TRIM_EVERY):
            self._jobs_first = await _trim(self._store, JOBS, self.committed)
        behind = self._cursor_tail - 1 - self._cursor_first
        if behind > 0 and (idle or behind >= TRIM_EVERY):
            self._cursor_first = await _trim(self._store, JOBS_CURSOR, self._cursor_tail - 1)


async def _trim(store: Store, stream: str, before_seq: int) -> int:
    """Trim `stream` below `before_seq`; its first seq after (what it was, if `before_seq`
    is past its tail: the stream was deleted under us, and there is nothing to trim)."""
    try:
        return await store.trim(stream, before_seq)
    except SeqOutOfRange as exc:
        return exc.first
