"""The NATS backend's reading side: heads (and how fresh they are), record windows, and the
wake-up watches of readers waiting at a tail.

**Heads.** A read gets the head (its `next` is the tail, its `first` the trim point) and the
records `[seq, seq + k)` by their exact subjects in one `multi_last` direct get, pipelined:
one round trip once the stream's life is known, two the first time. Readers trust the head:
records at or past `next` (a batch torn by a server crash mid-commit) are invisible.

**Freshness (R3).** Direct gets may be answered by a follower a few milliseconds behind. This
handle remembers the newest head it has seen per stream (its own appends, wake-ups) as a
*floor*: a head older than the floor is asked for again, then from the leader; a record the
head promises but a follower lacks is asked for again. A trim racing a read shows the same
way (the head promises records that were just purged), and the fresh head then says the
read is below its first seq.

**Watches.** A reader that waits at the tail subscribes to the stream's wake-up subject (the
server republishes every new head there); readers of one stream in one handle share one
subscription, which lingers a while after its last reader. No polling: the only timer is one
re-read `_SUB_SETTLE_S` after a subscription is made (a new interest takes a moment to reach
every server of a cluster). The subscription is made by a task of its own, so a reader
cancelled while it is being made (a client gone) leaves a watch that the next reader can
use: it never leaves one whose `ready` nobody will ever resolve.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable

import msgspec
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from ._contract import MAX_BATCH_BYTES, DurableError, ReadBatch, Record, SeqOutOfRange
from ._nats_layout import H_DELETED, Frame, Head, Layout
from ._nats_retry import Retry
from ._nats_wire import SEQUENCE, DirectMsg, JetStream

__all__ = ["At", "Heads", "Reader"]

_READ_WINDOW = 256  # records asked for in one read, at most
_CACHE_SIZE = 10_000  # streams whose head a handle remembers
_SUB_LINGER_S = 15.0  # a wake-up subscription outlives its last waiter by this much
_SUB_SETTLE_S = 0.25  # re-read once this long after subscribing (cluster interest)
_STALE_TRIES = 4  # direct gets that look behind before asking the leader
_UNREAD = object()

_head_decoder = msgspec.msgpack.Decoder(Head)
_frame_decoder = msgspec.msgpack.Decoder(Frame)


class At(msgspec.Struct, frozen=True):
    """A head and the stream sequence of its message."""

    head: Head
    seq: int


class Heads:
    """The heads this handle knows of, and reads of heads no older than those."""

    def __init__(self, js: JetStream, layout: Layout, retry: Retry) -> None:
        self._js = js
        self._layout = layout
        self._retry = retry
        # The newest head this handle knows of per stream (None: known absent), and the
        # highest head sequence it has seen or seen deleted (`True`: deleted), for freshness.
        self._known: OrderedDict[str, At | None] = OrderedDict()
        self._floors: OrderedDict[str, tuple[int, bool]] = OrderedDict()

    def known(self, stream: str) -> tuple[bool, At | None]:
        """(whether this handle remembers `stream`'s head, that head or None for absent)."""
        if stream in self._known:
            return True, self._known[stream]
        return False, None

    def remember(self, stream: str, at: At | None) -> None:
        self._known[stream] = at
        self._known.move_to_end(stream)
        if len(self._known) > _CACHE_SIZE:
            self._known.popitem(last=False)
        if at is not None:
            self.raise_floor(stream, at.seq, deleted=False)

    def raise_floor(self, stream: str, seq: int, *, deleted: bool) -> None:
        old = self._floors.get(stream)
        if old is None or seq > old[0] or (seq == old[0] and deleted):
            self._floors[stream] = (seq, deleted)
            self._floors.move_to_end(stream)
            if len(self._floors) > _CACHE_SIZE:
                self._floors.popitem(last=False)

    def _fresh(self, stream: str, at: At | None) -> bool:
        """Whether a head read from some replica is at least as new as what we know of."""
        floor = self._floors.get(stream)
        if floor is None:
            return True
        seq, deleted = floor
        if at is None:
            return deleted
        return at.seq > seq or (at.seq == seq and not deleted)

    @staticmethod
    def decode(msg: DirectMsg | None) -> At | None:
        return None if msg is None else At(_head_decoder.decode(msg.data), msg.seq)

    async def leader(self, stream: str) -> At | None:
        """The head as the stream's leader has it (authoritative)."""
        js_stream = self._layout.stream_of(stream)
        subject = self._layout.head_subject(stream)
        found = await self._retry(
            f"reading {stream}'s head", lambda: self._js.msg_get(js_stream, subject)
        )
        at = None if found is None else At(_head_decoder.decode(found[1]), found[0])
        if at is None:
            floor = self._floors.get(stream)
            if floor is not None:
                self.raise_floor(stream, floor[0], deleted=True)
        self.remember(stream, at)
        return at

    async def direct(self, stream: str) -> At | None:
        """The head as whichever replica answers has it."""
        js_stream = self._layout.stream_of(stream)
        subject = self._layout.head_subject(stream)
        msg = await self._retry(
            f"reading {stream}'s head", lambda: self._js.direct_last(js_stream, subject)
        )
        return self.decode(msg)

    async def fresh(self, stream: str, first: object = _UNREAD) -> At | None:
        """A head no older than any this handle has seen (`first`: one already read)."""
        at = await self.direct(stream) if first is _UNREAD else first
        for attempt in range(_STALE_TRIES):
            assert at is None or isinstance(at, At)
            if self._fresh(stream, at):
                self.remember(stream, at)
                return at
            await asyncio.sleep(0.002 * 2**attempt)
            at = await self.direct(stream)
        return await self.leader(stream)


class _Watch:
    """The wake-up subscription of one stream, shared by this handle's waiting readers."""

    def __init__(self, stream: str) -> None:
        self.stream = stream
        self.sub: Subscription | None = None
        self.ready: asyncio.Future[None] | None = None  # the subscribing task
        self.refs = 0
        self.waiters: set[asyncio.Future[None]] = set()
        self.linger: asyncio.TimerHandle | None = None

    def arm(self) -> asyncio.Future[None]:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.add(waiter)
        return waiter

    def disarm(self, waiter: asyncio.Future[None]) -> None:
        self.waiters.discard(waiter)

    def wake(self, exc: BaseException | None = None) -> None:
        for waiter in self.waiters:
            if not waiter.done():
                if exc is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(exc)


class Reader:
    """Reads and the wake-ups of readers waiting at a tail, of one handle."""

    def __init__(
        self,
        nc: Client,
        js: JetStream,
        layout: Layout,
        heads: Heads,
        retry: Retry,
        is_closed: Callable[[], bool],
    ) -> None:
        self._nc = nc
        self._js = js
        self._layout = layout
        self._heads = heads
        self._retry = retry
        self._is_closed = is_closed
        self._loop = asyncio.get_running_loop()
        self._watches: dict[str, _Watch] = {}

    @contextlib.asynccontextmanager
    async def wakeups(self, stream: str) -> AsyncIterator[_Watch]:
        """`stream`'s watch, for as long as one reader waits at its tail."""
        watch = await self._watch(stream)
        try:
            yield watch
        finally:
            self._unwatch(watch)

    async def read_now(
        self, stream: str, seq: int, max_records: int, max_bytes: int, bodies: bool
    ) -> ReadBatch:
        _, cached = self._heads.known(stream)
        # Without bodies, the server still sends them (a direct get has no projection): its
        # answer is bounded by the contract's batch size, and the bodies are dropped here.
        wire_bytes = max_bytes if bodies else MAX_BATCH_BYTES
        window = min(max_records, _READ_WINDOW)
        if cached is not None and cached.head.next > seq:
            window = min(window, cached.head.next - seq + 16)
        else:
            window = min(window, 16)
        for attempt in range(_STALE_TRIES + 1):
            msgs: list[DirectMsg] | None = None
            if cached is not None and attempt == 0:
                # Pipelined: the head, and the records of the life we know of.
                first, msgs = await asyncio.gather(
                    self._heads.direct(stream),
                    self._records(stream, cached.head.gen, seq, window, wire_bytes),
                )
                at = await self._heads.fresh(stream, first)
            else:
                at = await self._heads.fresh(stream)
            tail = at.head.next if at is not None else 0
            first_seq = at.head.first if at is not None else 0
            if seq > tail or seq < first_seq:
                raise SeqOutOfRange(stream, seq, tail, first_seq)
            if seq == tail or at is None:
                return ReadBatch([], tail)
            if msgs is None or at.head.gen != cached.head.gen:  # type: ignore[union-attr]
                window = min(max_records, _READ_WINDOW, tail - seq)
                msgs = await self._records(stream, at.head.gen, seq, window, wire_bytes)
            records = _contiguous(msgs, at.head.gen, seq, tail, max_records, max_bytes, bodies)
            if records:
                return ReadBatch(records, tail)
            # The head promises records this replica does not have (yet, or any more: a
            # trim): ask again.
            cached = at
            await asyncio.sleep(0.002 * 2**attempt)
        raise DurableError(f"reading {stream}: the store's replicas disagree about seq {seq}")

    async def _records(
        self, stream: str, gen: str, seq: int, count: int, max_bytes: int
    ) -> list[DirectMsg]:
        layout = self._layout
        subjects = [layout.record_subject(stream, gen, seq + i) for i in range(max(1, count))]
        # The server counts subjects and NATS headers too, and stops after the message that
        # crosses its limit: give it room for every record our own limit could let through.
        server_bytes = max_bytes + len(subjects) * (len(subjects[0]) + 512)
        return await self._retry(
            f"reading {stream}",
            lambda: self._js.direct_multi(
                layout.stream_of(stream), subjects, max_bytes=server_bytes
            ),
        )

    # -- wake-ups -----------------------------------------------------------------------

    async def _watch(self, stream: str) -> _Watch:
        watch = self._watches.get(stream)
        if watch is None:
            watch = self._watches[stream] = _Watch(stream)
            watch.ready = asyncio.ensure_future(self._subscribe(watch))
            # Retrieved here too, for when every reader that waited on it was cancelled.
            watch.ready.add_done_callback(lambda t: t.cancelled() or t.exception())
        # Counted before waiting, so a reader cancelled while the subscription is being made
        # gives its count back, and the watch lingers and goes like any other.
        watch.refs += 1
        if watch.linger is not None:
            watch.linger.cancel()
            watch.linger = None
        try:
            assert watch.ready is not None
            await asyncio.shield(watch.ready)
        except BaseException:
            self._unwatch(watch)
            raise
        return watch

    async def _subscribe(self, watch: _Watch) -> None:
        """Make `watch`'s subscription (a task of its own: no reader's cancellation stops it)."""
        try:
            watch.sub = await self._nc.subscribe(
                self._layout.wake_subject(watch.stream), cb=self._wake_callback(watch)
            )
        except BaseException as exc:
            if self._watches.get(watch.stream) is watch:
                del self._watches[watch.stream]  # the next reader makes a new one
            if isinstance(exc, nats.errors.Error | OSError):
                raise DurableError(f"watching {watch.stream} failed: {exc}") from exc
            raise
        # A new interest reaches the other servers of a cluster a moment later; a head
        # republished there meanwhile would be missed, so look once more after that.
        self._loop.call_later(_SUB_SETTLE_S, watch.wake)

    def _unwatch(self, watch: _Watch) -> None:
        watch.refs -= 1
        if watch.refs == 0 and not self._is_closed():
            watch.linger = self._loop.call_later(_SUB_LINGER_S, self._drop_watch, watch)

    def _drop_watch(self, watch: _Watch) -> None:
        if watch.refs == 0 and self._watches.get(watch.stream) is watch:
            del self._watches[watch.stream]
            if watch.sub is not None:
                task = asyncio.ensure_future(watch.sub.unsubscribe())
                task.add_done_callback(lambda t: t.cancelled() or t.exception())

    def _wake_callback(self, watch: _Watch) -> Callable[[Msg], Awaitable[None]]:
        async def on_wake(msg: Msg) -> None:
            headers = msg.headers or {}
            deleted = headers.get(H_DELETED)
            with contextlib.suppress(ValueError):
                if deleted is not None:
                    self._heads.raise_floor(watch.stream, int(deleted), deleted=True)
                elif SEQUENCE in headers:
                    self._heads.raise_floor(watch.stream, int(headers[SEQUENCE]), deleted=False)
            watch.wake()

        return on_wake

    def wake_all(self) -> None:
        """Every waiting reader reads again (a wake-up may have been lost)."""
        for watch in self._watches.values():
            watch.wake()

    def close(self, exc: BaseException) -> None:
        """End every waiting read with `exc`."""
        for watch in self._watches.values():
            watch.wake(exc)
            if watch.linger is not None:
                watch.linger.cancel()


def _contiguous(
    msgs: list[DirectMsg],
    gen: str,
    seq: int,
    tail: int,
    max_records: int,
    max_bytes: int,
    bodies: bool = True,
) -> list[Record]:
    """The records `seq`, `seq + 1`, ... of life `gen` found in `msgs`, below `tail`, within
    `max_records` and `max_bytes` (at least one if `seq` is there); without `bodies`, each
    body left out and `max_bytes` counting headers only."""
    suffix = f".{gen}."
    found: dict[int, DirectMsg] = {}
    for msg in msgs:
        head, _, last = msg.subject.rpartition(".")
        if head.endswith(suffix[:-1]) and last.isdigit():
            found[int(last)] = msg
    records: list[Record] = []
    size = 0
    n = seq
    while n < tail and len(records) < max_records and n in found:
        frame = _frame_decoder.decode(found[n].data)
        size += sum(len(k) + len(v) for k, v in frame.headers)
        size += len(frame.body) if bodies else 0
        if records and size > max_bytes:
            break
        if bodies:
            records.append(Record(n, frame.ts, frame.headers, frame.body))
        else:
            records.append(Record(n, frame.ts, frame.headers, b"", omitted=len(frame.body)))
        n += 1
    return records
