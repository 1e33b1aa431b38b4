"""The NATS backend's writing side: batches sized to the server, the conditional commit that
makes seqs dense, recovery of an append whose answer was lost, and trim.

**Limits.** The server refuses (and drops the connection of) a message over its
`max_payload`, counting NATS headers and body, and an atomic batch over its batch size
(`jetstream { limits { batch { max_msgs } } }`, 1000 by default). `limits_for` turns the two
into the store's `Limits`: a record is one message, so it holds `max_payload` less the NATS
headers and the frame (`_nats_layout`); an append is one batch with its head, so it holds
one record fewer than the batch size. A stock server (1 MiB, 1000) takes records of about
1,022 KiB and appends of 999 records; `max_payload: 2MB` and `max_msgs: 1001` give the
contract's maxima.

**Commit.** An append is one atomic batch: its records, then the new head. The first message
carries `Nats-Expected-Last-Subject-Sequence` = the stream sequence of the head it read (0:
none) for the head's subject, so the batch is stored only if nobody appended (or deleted, or
trimmed) since: that check is the whole of concurrency control, for claims
(`match_seq_num=0`), conditional and plain appends alike. A failed check costs a leader read
of the head and, for a plain append, a retry.

**Lost answers.** Each try carries a fresh token in its head. A batch whose answer was lost
may have landed (even after a later try was refused because of it): the head then carries
one of this call's tokens, and the append reports where it landed instead of appending
twice. A trim keeps the head's token for that reason.

**Trim** writes a new head with `first` raised (one conditional publish, retried like an
append), then purges that life's record messages below the first kept one. If the purge
fails, or the process dies before it, those messages are invisible (below `first`) and the
next trim's purge takes them.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import deque
from collections.abc import Callable, Sequence

import msgspec

from ._contract import (
    CONTRACT_LIMITS,
    MAX_BATCH_BYTES,
    MAX_BATCH_RECORDS,
    MAX_BODY_BYTES,
    MAX_HEADERS,
    AppendAck,
    AppendRecord,
    DurableError,
    Limits,
    RecordTooLarge,
    SeqMismatch,
    SeqOutOfRange,
    StoreClosed,
)
from ._nats_layout import NATS_HEADERS_RESERVE, Frame, Head, Layout, frame_overhead
from ._nats_reader import At, Heads
from ._nats_retry import Backoff, Retry
from ._nats_wire import (
    ERR_BATCH_INCOMPLETE,
    ERR_BATCH_TOO_LARGE,
    ERR_WRONG_LAST_SEQ,
    EXPECTED_LAST_SUBJECT_SEQ,
    EXPECTED_LAST_SUBJECT_SEQ_SUBJECT,
    ApiError,
    JetStream,
    NoAnswer,
)

__all__ = ["MIN_MAX_PAYLOAD", "Committer", "Op", "Writers", "limits_for"]

log = logging.getLogger("speechd.durable")

_head_encoder = msgspec.msgpack.Encoder()
_frame_encoder = msgspec.msgpack.Encoder()

# The smallest `max_payload` speechd runs on: records of 60 KiB or so.
MIN_MAX_PAYLOAD = 64 * 1024


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def limits_for(max_payload: int, batch_msgs: int) -> Limits:
    """The store's limits on a server with this `max_payload` and atomic batch size."""
    room = max_payload - NATS_HEADERS_RESERVE - frame_overhead(MAX_HEADERS)
    return Limits(
        max_record_bytes=min(room, CONTRACT_LIMITS.max_record_bytes),
        max_batch_records=min(batch_msgs - 1, MAX_BATCH_RECORDS),
        max_batch_bytes=MAX_BATCH_BYTES,
        max_body_bytes=min(room, MAX_BODY_BYTES),
    )


class Op:
    """A queued append; `future` is its caller's."""

    __slots__ = ("future", "match", "records", "size")

    def __init__(
        self,
        records: Sequence[AppendRecord],
        match: int | None,
        size: int,
        future: asyncio.Future[AppendAck],
    ) -> None:
        self.records = records
        self.match = match
        self.size = size
        self.future = future


class Committer:
    """Commits appends and trims against the heads this handle knows."""

    def __init__(
        self,
        js: JetStream,
        layout: Layout,
        heads: Heads,
        retry: Retry,
        limits: Limits,
        max_payload: int,
    ) -> None:
        self._js = js
        self._layout = layout
        self._heads = heads
        self._retry = retry
        self.limits = limits
        self._max_payload = max_payload

    def _messages(
        self, stream: str, gen: str, start: int, ts: int, records: list[AppendRecord]
    ) -> list[tuple[str, bytes]]:
        messages = []
        for i, record in enumerate(records):
            data = _frame_encoder.encode(Frame(ts, tuple(record.headers), record.body))
            # `limits` leaves room for this; a message over max_payload would cost the
            # connection, so it is checked here too, before anything is sent.
            if len(data) + NATS_HEADERS_RESERVE > self._max_payload:
                raise RecordTooLarge(
                    f"appending to {stream}: a record of {len(data)} bytes framed is over the"
                    f" NATS server's max_payload of {self._max_payload}"
                )
            messages.append((self._layout.record_subject(stream, gen, start + i), data))
        return messages

    async def commit(self, stream: str, ops: list[Op]) -> list[AppendAck]:
        """Append `ops` as one atomic batch where the head says; retry lost races."""
        records = [record for op in ops for record in op.records]
        match = ops[0].match if len(ops) == 1 else None
        head_subject = self._layout.head_subject(stream)
        deadline = asyncio.get_running_loop().time() + self._retry.retry_s
        backoff = Backoff()
        trusted = False  # whether `at` came from the leader just now
        # Every batch this call sent: one whose answer was lost may have landed (even after a
        # later try was refused because of it), and then the head carries its token.
        sent: set[str] = set()
        known, at = self._heads.known(stream)
        if not known:
            at, trusted = await self._heads.leader(stream), True
        while True:
            self._retry.check_open()
            head = at.head if at is not None else None
            if head is not None and head.token in sent:
                next_seq, ts = head.next - len(records), head.ts
                break
            next_seq = head.next if head is not None else 0
            if match is not None and match != next_seq:
                if not trusted:
                    at, trusted = await self._heads.leader(stream), True
                    continue
                raise SeqMismatch(stream, match, next_seq)
            gen = head.gen if head is not None else secrets.token_hex(6)
            ts = max(_now_ms(), head.ts if head is not None else 0)
            token = secrets.token_hex(8)
            sent.add(token)
            first = head.first if head is not None else 0
            new_head = Head(gen, next_seq + len(records), ts, token, first)
            messages = self._messages(stream, gen, next_seq, ts, records)
            messages.append((head_subject, _head_encoder.encode(new_head)))
            try:
                ack = await self._js.publish_atomic(messages, self._condition(stream, at))
            except ApiError as exc:
                if exc.err_code == ERR_BATCH_TOO_LARGE:
                    raise RecordTooLarge(
                        f"appending to {stream}: the NATS server refuses a batch of"
                        f" {len(messages)} messages ({exc.description})"
                    ) from exc
                if exc.err_code != ERR_WRONG_LAST_SEQ:
                    if not (exc.transient or exc.err_code == ERR_BATCH_INCOMPLETE):
                        raise DurableError(f"appending to {stream} failed: {exc}") from exc
                    await backoff.wait(deadline, f"appending to {stream}", exc)
                at, trusted = await self._heads.leader(stream), True
                continue
            except NoAnswer as exc:
                # The batch may or may not have been stored: the head says which.
                await backoff.wait(deadline, f"appending to {stream} (outcome unknown)", exc)
                at, trusted = await self._heads.leader(stream), True
                continue
            self._heads.remember(stream, At(new_head, ack.seq))
            break
        acks = []
        start = next_seq
        for op in ops:
            acks.append(AppendAck(start, start + len(op.records), ts))
            start += len(op.records)
        return acks

    def _condition(self, stream: str, at: At | None) -> dict[str, str]:
        return {
            EXPECTED_LAST_SUBJECT_SEQ: str(at.seq if at is not None else 0),
            EXPECTED_LAST_SUBJECT_SEQ_SUBJECT: self._layout.head_subject(stream),
        }

    async def trim(self, stream: str, before_seq: int) -> int:
        """Raise `stream`'s first seq to `before_seq` (see the module docstring)."""
        js_stream = self._layout.stream_of(stream)
        deadline = asyncio.get_running_loop().time() + self._retry.retry_s
        backoff = Backoff()
        cut: tuple[str, int] | None = None  # (life, stream sequence) to purge below
        at = await self._heads.leader(stream)
        while True:
            self._retry.check_open()
            tail = at.head.next if at is not None else 0
            first = at.head.first if at is not None else 0
            if before_seq < 0 or before_seq > tail:
                raise SeqOutOfRange(stream, before_seq, tail, first)
            if at is None or before_seq <= first:
                break
            head = at.head
            if before_seq == tail:
                cut = (head.gen, at.seq)  # every record message is older than its head
            else:
                subject = self._layout.record_subject(stream, head.gen, before_seq)
                found = await self._retry(
                    f"trimming {stream}", lambda s=subject: self._js.msg_get(js_stream, s)
                )
                cut = (head.gen, found[0]) if found is not None else None
            new_head = Head(head.gen, head.next, head.ts, head.token, before_seq)
            try:
                ack = await self._js.publish(
                    self._layout.head_subject(stream),
                    _head_encoder.encode(new_head),
                    self._condition(stream, at),
                )
            except ApiError as exc:
                if exc.err_code != ERR_WRONG_LAST_SEQ:
                    if not exc.transient:
                        raise DurableError(f"trimming {stream} failed: {exc}") from exc
                    await backoff.wait(deadline, f"trimming {stream}", exc)
            except NoAnswer as exc:
                await backoff.wait(deadline, f"trimming {stream} (outcome unknown)", exc)
            else:
                self._heads.remember(stream, At(new_head, ack.seq))
                first = before_seq
                break
            at = await self._heads.leader(stream)  # lost a race, or landed unheard: look
        if cut is not None and first >= before_seq:
            gen, below = cut
            try:
                await self._retry(
                    f"purging {stream}'s trimmed records",
                    lambda: self._js.purge(
                        js_stream, self._layout.records_filter(stream, gen), before_seq=below
                    ),
                )
            except DurableError:
                log.warning("store: %s trimmed, but purging its records failed", stream)
        return first


class _StreamWriter:
    """One stream's appends from this handle, one batch at a time, in order.

    Consecutive unconditional appends queued meanwhile go out as one batch (each gets its own
    ack). An append cancelled before its batch is sent is not applied; one cancelled later is
    applied and its caller does not hear. The task ends when the queue is empty.
    """

    def __init__(self, writers: Writers, stream: str) -> None:
        self.writers = writers
        self.stream = stream
        self.queue: deque[Op] = deque()
        self.task: asyncio.Task[None] | None = None

    def submit(self, op: Op) -> None:
        self.queue.append(op)
        if self.task is None:
            self.task = asyncio.create_task(self._run(), name=f"speechd-nats-append:{self.stream}")

    def _take(self) -> list[Op]:
        limits = self.writers.committer.limits
        group: list[Op] = []
        records = size = 0
        while self.queue:
            op = self.queue[0]
            if op.future.done():  # cancelled before we got to it
                self.queue.popleft()
                continue
            if group and (
                op.match is not None
                or group[0].match is not None
                or records + len(op.records) > limits.max_batch_records
                or size + op.size > limits.max_batch_bytes
            ):
                break
            group.append(self.queue.popleft())
            records += len(op.records)
            size += op.size
        return group

    async def _run(self) -> None:
        try:
            while group := self._take():
                try:
                    acks = await self.writers.committer.commit(self.stream, group)
                except Exception as exc:
                    for op in group:
                        if not op.future.done():
                            op.future.set_exception(exc)
                else:
                    for op, ack in zip(group, acks, strict=True):
                        if not op.future.done():
                            op.future.set_result(ack)
        finally:
            self.task = None
            for op in self.queue:  # only left here if the task itself was cancelled
                if not op.future.done():
                    op.future.set_exception(StoreClosed("the store is closed"))
            self.queue.clear()
            self.writers.done(self)


class Writers:
    """The per-stream writers of one handle."""

    def __init__(self, committer: Committer, timeout: Callable[[], float]) -> None:
        self.committer = committer
        self._timeout = timeout
        self._writers: dict[str, _StreamWriter] = {}

    def submit(self, stream: str, op: Op) -> None:
        writer = self._writers.get(stream)
        if writer is None:
            writer = self._writers[stream] = _StreamWriter(self, stream)
        writer.submit(op)

    def done(self, writer: _StreamWriter) -> None:
        if self._writers.get(writer.stream) is writer:
            del self._writers[writer.stream]

    async def close(self) -> None:
        """Let the batches in flight finish (within one request's timeout), then cancel."""
        tasks = [w.task for w in self._writers.values() if w.task is not None]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=self._timeout())
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
