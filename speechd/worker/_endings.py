"""How a cast's attempts end: a finished cast's receipt in `progress/done` (a window of the last
`receipts` of them) and its job finished; a cast given up for good with a terminal `error`, its
job in `jobs/dead` and a live cast's input closed. `Attempts` decides when; this says it in the
store.
"""

from __future__ import annotations

import logging

import msgspec

from speechd.casts import close_input, read_input_state
from speechd.casts.schema import (
    JOBS_DEAD,
    PROGRESS_DONE,
    DeadJob,
    Eos,
    Failure,
    Meta,
    Receipt,
    cast_stream,
    decode,
    encode,
    error_record,
)
from speechd.durable import AppendRecord, SeqMismatch, SeqOutOfRange, Store

from ._cast import Admitted, JobRef
from ._intake import TRIM_EVERY, Intake
from ._ownership import Ownership

__all__ = ["RECEIPTS", "Endings"]

log = logging.getLogger("speechd.worker")

RECEIPTS = 10_000  # receipts kept in `progress/done` (WorkerConfig.receipts)
_CLOSE_TRIES = 8  # a failed live cast's input closed, against pieces still landing


class Endings:
    """Ends casts in the store for one worker (see the module)."""

    def __init__(
        self,
        store: Store,
        intake: Intake,
        ownership: Ownership,
        *,
        worker_id: str,
        receipts: int = RECEIPTS,
    ) -> None:
        self._store = store
        self._intake = intake
        self._ownership = ownership
        self._worker_id = worker_id
        self._receipts = receipts
        self._receipts_first = 0  # what we know of `progress/done`'s first seq

    async def finished(self, cast: Admitted, eos: Eos) -> None:
        """The cast's eos is durable: release its lease, append its receipt (keeping the
        window of `progress/done`), finish its job."""
        await self._ownership.release(cast)
        receipt = Receipt(
            id=cast.id,
            attempt=cast.attempt,
            worker=self._worker_id,
            chunks=eos.chunks,
            audio_ms=eos.audio_ms,
            gen_ms=eos.gen_ms,
            xrt=round(eos.audio_ms / max(eos.gen_ms, 1), 3),
        )
        ack = await self._store.append(PROGRESS_DONE, [AppendRecord(encode(receipt))])
        await self._trim_receipts(ack.next_seq)
        log.info("cast %s done: %d ms of audio in %d ms", cast.id, eos.audio_ms, eos.gen_ms)
        await self._intake.finish(cast.job)

    async def _trim_receipts(self, tail: int) -> None:
        """Keep the last `receipts` records of `progress/done` (readers resume at its first
        seq), and fewer than twice that: one trim per `min(receipts, TRIM_EVERY)` receipts."""
        before = tail - self._receipts
        if before - self._receipts_first < min(self._receipts, TRIM_EVERY):
            return
        try:
            self._receipts_first = await self._store.trim(PROGRESS_DONE, before)
        except SeqOutOfRange as exc:  # emptied under us: nothing to trim
            self._receipts_first = exc.first

    async def give_up(
        self, job: JobRef, seq: int, attempt: int, message: str, start_seq: int
    ) -> None:
        """End the cast with a terminal `error`, send its job to `jobs/dead`, finish it."""
        log.error("cast %s failed for good: %s", job.id, message)
        failure = Failure(message=message, attempts=max(attempt, 1))
        try:
            await self._store.append(
                cast_stream(job.id),
                [error_record(attempt, failure, start_seq)],
                match_seq_num=seq,
            )
        except SeqMismatch as lost:
            self._ownership.defer(job, lost.next_seq)
            return
        dead = DeadJob(id=job.id, error=message, attempts=max(attempt, 1))
        await self._store.append(JOBS_DEAD, [AppendRecord(encode(dead))])
        await self._abandon_input(job.id)
        await self._intake.finish(job)

    async def _abandon_input(self, cast_id: str) -> None:
        """A live cast that failed takes no more input (its writer is answered with the
        cast's error): its input is closed, even one that no piece reached yet."""
        for _ in range(_CLOSE_TRIES):
            state = await read_input_state(self._store, cast_id)
            if state.closed or not (state.tail or await self._is_live(cast_id)):
                return
            if await close_input(self._store, cast_id, state, "abandoned"):
                return
            # A piece landed meanwhile: close after it.

    async def _is_live(self, cast_id: str) -> bool:
        """Whether the cast takes its text over time (its meta says so)."""
        batch = await self._store.read(cast_stream(cast_id), 0, max_records=1)
        if not batch.records:
            return False
        try:
            return decode(batch.records[0].body, Meta).live
        except msgspec.DecodeError:
            return False
