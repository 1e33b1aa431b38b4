"""The NATS JetStream backend: every speechd stream is a handful of subjects in a few JetStream
streams, so many hosts share one set of streams on a replicated engine.

    nats://host:port[,host:port...][/?namespace=NS&shards=N&replicas=R&timeout=S]

`namespace` (default `speechd`) keeps deployments on one NATS apart; `shards` (default 4, then
whatever the existing streams say) and `replicas` (default 1; 3 for R3) apply when the
JetStream streams are first made. `timeout` is one request's limit (default 5 s); a request
that fails for want of an answer or a leader is retried for up to `retry` s (default 60).

Layout (persisted, so keep it stable; each JetStream stream's metadata says `speechd.layout`):

    JetStream stream  speechd_<ns>_<k>, k < shards; a name goes to shard crc32(name) % shards.
                      Subjects `speechd.<ns>.<k>.>`, file storage, max 1 message per subject,
                      atomic batches and direct gets allowed, heads republished (below).
    head              speechd.<ns>.<k>.h.<X>       one message: msgpack [gen, next seq,
                                                    timestamp ms, append token]
    record seq n      speechd.<ns>.<k>.r.<X>.<gen>.<n>   msgpack [timestamp ms, headers, body]
    wake-up           speechd-wake.<ns>.h.<X>      core NATS: the server republishes each new
                                                    head here; a delete publishes a notice

`<X>` is the stream name with `/` as `.` and `.` inside a segment as `~` (names never hold
`~`, so the escape is unambiguous); `<gen>` names one life of the stream (12 random hex
digits), so records of a deleted life never mix with a new one.

The contract, mapped:

* **Dense seqs, batches, conditions.** An append is one atomic batch (server 2.12+): its
  records, then the new head. The first message carries `Nats-Expected-Last-Subject-Sequence`
  = the stream sequence of the head it read (0: none) for the head's subject, so the batch is
  stored only if nobody appended (or deleted) since: that check is the whole of concurrency
  control, for claims (`match_seq_num=0`), conditional and plain appends alike. A failed check
  costs a leader read of the head and, for a plain append, a retry. Readers trust the head:
  records at or past `next` (a batch torn by a server crash mid-commit) are invisible and are
  overwritten by the next append at those seqs.
* **Reads.** A read gets the head (its `next` is the tail) and the records `[seq, seq + k)` by
  their exact subjects in one `multi_last` direct get, pipelined: one round trip once the
  stream's life is known, two the first time. At the tail it waits on the wake-up subject.
* **Follow** is reads in a loop; each record costs one republished head (pushed) and one round
  trip. No polling: the only timer is one re-read 0.25 s after a subscription is made (a new
  interest takes a moment to reach every server of a cluster).
* **Delete** removes the head message by its sequence (so it removes exactly the life it
  read; a concurrent append makes it look again), then purges that life's records. Between the
  two the records are invisible garbage; if the deleter dies there, they stay so.
* **Sweep** lists heads and deletes each one whose timestamp is older than the cutoff by that
  head's sequence: an append landing meanwhile replaced the head, so that stream survives.
* **list** reads head subject names from stream info (`subjects_filter` on the complete name
  segments of the prefix), then the heads of up to `limit` names in `multi_last` requests.

Costs (R1, one handle): append = n+1 messages, 1 round trip (plus 1 leader read when the head
is not cached or a condition fails); read = 2 messages out, k+2 back, 1 round trip; check_tail
= 1 round trip; follow = 1 pushed head + 1 round trip per append; list = 1 stream-info request
per shard + 1 direct get per 1000 streams; delete = 3 requests. The server keeps one subject
per record in its index (~100 bytes of memory each).

Clock: a record's timestamp is the appender's clock, raised to the previous head's timestamp,
so it never goes back within a stream; keep hosts' clocks in sync for sweeps to be fair.

Replicas (R3): direct gets may be answered by a follower a few milliseconds behind. A read
checks the head it got against the newest one this handle has seen (its own appends, wake-ups)
and asks again, then the leader; a record the head promises but a follower lacks is asked for
again. Across handles that share nothing, a read can briefly lag a write acknowledged elsewhere
(conditional appends are always checked by the leader).

Server requirements (the tests' configuration does all of this): nats-server 2.12+ with
JetStream, `max_payload` at least 1.1 MB (a record is up to 1 MiB + 64 KiB of headers;
`max_payload: 2MB`), `jetstream { limits { batch { max_msgs: 1001 } } }` (a 1000-record append
plus its head), and, for the durability speechd promises, `jetstream { sync_interval: always }`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import re
import secrets
import time
import zlib
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, Final, TypeVar
from urllib.parse import parse_qs

import msgspec
import nats
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from ._contract import (
    MAX_BATCH_BYTES,
    MAX_BODY_BYTES,
    MAX_HEADER_BYTES,
    AppendAck,
    AppendRecord,
    DurableError,
    ReadBatch,
    Record,
    SeqMismatch,
    SeqOutOfRange,
    Store,
    StoreClosed,
    StreamInfo,
    check_batch,
    validate_name,
)
from ._nats_wire import (
    ERR_BATCH_INCOMPLETE,
    ERR_BATCH_TOO_LARGE,
    ERR_STREAM_NAME_IN_USE,
    ERR_STREAM_NOT_FOUND,
    ERR_WRONG_LAST_SEQ,
    EXPECTED_LAST_SUBJECT_SEQ,
    EXPECTED_LAST_SUBJECT_SEQ_SUBJECT,
    SEQUENCE,
    ApiError,
    DirectMsg,
    JetStream,
    NoAnswer,
    WireError,
)

__all__ = ["H_DELETED", "LAYOUT_VERSION", "REQUIRED_MAX_PAYLOAD", "NatsStore"]

log = logging.getLogger("speechd.durable")

T = TypeVar("T")

LAYOUT_VERSION: Final = "1"
H_DELETED: Final[str] = "Speechd-Deleted"
"""On a wake-up notice published by `delete`: the stream sequence of the head it removed."""

# A record's frame plus the batch and condition headers NATS keeps with it.
REQUIRED_MAX_PAYLOAD: Final = MAX_BODY_BYTES + MAX_HEADER_BYTES + 16 * 1024

_DEFAULT_SHARDS = 4
_DEFAULT_TIMEOUT_S = 5.0
_DEFAULT_RETRY_S = 60.0
_NAMESPACE = re.compile(r"[A-Za-z0-9_-]{1,64}")
_READ_WINDOW = 256  # records asked for in one read, at most
_LIST_PAGE = 1000  # heads per multi_last request (the server answers at most 1024)
_CACHE_SIZE = 10_000  # streams whose head a handle remembers
_SUB_LINGER_S = 15.0  # a wake-up subscription outlives its last waiter by this much
_SUB_SETTLE_S = 0.25  # re-read once this long after subscribing (cluster interest)
_STALE_TRIES = 4  # direct gets that look behind before asking the leader
_SWEEP_CONCURRENCY = 16
_UNREAD = object()


class _Head(msgspec.Struct, array_like=True, frozen=True):
    """A stream's head message (persisted: fields only ever appended, with defaults)."""

    gen: str
    next: int
    ts: int
    token: str


class _Frame(msgspec.Struct, array_like=True, frozen=True):
    """A record message's body (persisted: fields only ever appended, with defaults)."""

    ts: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes


class _At(msgspec.Struct, frozen=True):
    """A head and the stream sequence of its message."""

    head: _Head
    seq: int


_head_encoder = msgspec.msgpack.Encoder()
_head_decoder = msgspec.msgpack.Decoder(_Head)
_frame_decoder = msgspec.msgpack.Decoder(_Frame)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _escape(name: str) -> str:
    return ".".join(segment.replace(".", "~") for segment in name.split("/"))


def _unescape(tokens: str) -> str:
    return "/".join(token.replace("~", ".") for token in tokens.split("."))


class _Layout:
    """Where a name's head, records and wake-ups live (see the module docstring)."""

    def __init__(self, namespace: str, shards: int) -> None:
        self.namespace = namespace
        self.shards = shards
        self.wake_root = f"speechd-wake.{namespace}.h"

    def stream(self, shard: int) -> str:
        return f"speechd_{self.namespace}_{shard}"

    def root(self, shard: int) -> str:
        return f"speechd.{self.namespace}.{shard}"

    def shard(self, name: str) -> int:
        return zlib.crc32(name.encode()) % self.shards

    def head_subject(self, name: str) -> str:
        return f"{self.root(self.shard(name))}.h.{_escape(name)}"

    def record_subject(self, name: str, gen: str, seq: int) -> str:
        return f"{self.root(self.shard(name))}.r.{_escape(name)}.{gen}.{seq}"

    def records_filter(self, name: str, gen: str) -> str:
        return f"{self.root(self.shard(name))}.r.{_escape(name)}.{gen}.*"

    def wake_subject(self, name: str) -> str:
        return f"{self.wake_root}.{_escape(name)}"

    def name_of_head(self, shard: int, subject: str) -> str:
        return _unescape(subject[len(self.root(shard)) + 3 :])

    def config(self, shard: int, replicas: int) -> dict[str, Any]:
        root = self.root(shard)
        return {
            "name": self.stream(shard),
            "subjects": [f"{root}.>"],
            "retention": "limits",
            "storage": "file",
            "num_replicas": replicas,
            "max_msgs": -1,
            "max_bytes": -1,
            "max_age": 0,
            "max_msgs_per_subject": 1,
            "discard": "old",
            "allow_direct": True,
            "allow_atomic": True,
            "republish": {"src": f"{root}.h.>", "dest": f"{self.wake_root}.>"},
            "metadata": {"speechd.layout": LAYOUT_VERSION, "speechd.shards": str(self.shards)},
        }


def _parse_url(url: str) -> tuple[list[str], dict[str, str]]:
    scheme, _, rest = url.partition("://")
    hosts, _, query = rest.partition("?")
    hosts = hosts.rstrip("/")
    if not hosts or "/" in hosts:
        raise DurableError(f"malformed NATS store URL {url!r}")
    servers = [f"{scheme}://{host}" for host in hosts.split(",") if host]
    params = {key: values[-1] for key, values in parse_qs(query).items()}
    unknown = set(params) - {"namespace", "shards", "replicas", "timeout", "retry"}
    if unknown:
        raise DurableError(f"unknown NATS store URL parameters: {', '.join(sorted(unknown))}")
    return servers, params


def _number(params: dict[str, str], key: str, kind: type[T], default: T) -> T:
    if key not in params:
        return default
    try:
        value = kind(params[key])  # type: ignore[call-arg]
    except ValueError as exc:
        raise DurableError(f"NATS store URL: {key}={params[key]!r} is not a number") from exc
    if value <= 0:  # type: ignore[operator]
        raise DurableError(f"NATS store URL: {key} must be positive")
    return value


@contextlib.contextmanager
def _translated(doing: str) -> Iterator[None]:
    """The wire's errors as `DurableError`, chained."""
    try:
        yield
    except WireError as exc:
        raise DurableError(f"{doing} failed: {exc}") from exc


class _Op:
    """A queued append; `future` is its caller's."""

    __slots__ = ("future", "match", "records", "size")

    def __init__(
        self, records: Sequence[AppendRecord], match: int | None, size: int, future: Any
    ) -> None:
        self.records = records
        self.match = match
        self.size = size
        self.future: asyncio.Future[AppendAck] = future


class _Writer:
    """One stream's appends from this handle, one batch at a time, in order.

    Consecutive unconditional appends queued meanwhile go out as one batch (each gets its own
    ack). An append cancelled before its batch is sent is not applied; one cancelled later is
    applied and its caller does not hear. The task ends when the queue is empty.
    """

    def __init__(self, store: NatsStore, stream: str) -> None:
        self.store = store
        self.stream = stream
        self.queue: deque[_Op] = deque()
        self.task: asyncio.Task[None] | None = None

    def submit(self, op: _Op) -> None:
        self.queue.append(op)
        if self.task is None:
            self.task = asyncio.create_task(self._run(), name=f"speechd-nats-append:{self.stream}")

    def _take(self) -> list[_Op]:
        group: list[_Op] = []
        records = size = 0
        while self.queue:
            op = self.queue[0]
            if op.future.done():  # cancelled before we got to it
                self.queue.popleft()
                continue
            if group and (
                op.match is not None
                or group[0].match is not None
                or records + len(op.records) > 1000
                or size + op.size > MAX_BATCH_BYTES
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
                    acks = await self.store._commit(self.stream, group)
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
            if self.store._writers.get(self.stream) is self:
                del self.store._writers[self.stream]


class _Watch:
    """The wake-up subscription of one stream, shared by this handle's waiting readers."""

    def __init__(self, stream: str) -> None:
        self.stream = stream
        self.sub: Subscription | None = None
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.refs = 0
        self.waiters: set[asyncio.Future[None]] = set()
        self.linger: asyncio.TimerHandle | None = None

    def arm(self) -> asyncio.Future[None]:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.add(waiter)
        return waiter

    def wake(self, exc: BaseException | None = None) -> None:
        for waiter in self.waiters:
            if not waiter.done():
                if exc is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(exc)


class NatsStore(Store):
    """The stream store on NATS JetStream. Open with `await NatsStore.open(url)`."""

    def __init__(
        self, nc: Client, js: JetStream, layout: _Layout, *, retry_s: float, replicas: int
    ) -> None:
        """Use `open`, which connects and makes the JetStream streams."""
        self._nc = nc
        self._js = js
        self._layout = layout
        self._retry_s = retry_s
        self._replicas = replicas
        self._loop = asyncio.get_running_loop()
        self._closed = False
        self._writers: dict[str, _Writer] = {}
        self._watches: dict[str, _Watch] = {}
        # The newest head this handle knows of per stream (None: known absent), and the
        # highest head sequence it has seen or seen deleted (`True`: deleted), for freshness.
        self._heads: OrderedDict[str, _At | None] = OrderedDict()
        self._floors: OrderedDict[str, tuple[int, bool]] = OrderedDict()

    # -- opening ------------------------------------------------------------------------

    @classmethod
    async def open(cls, url: str) -> NatsStore:
        servers, params = _parse_url(url)
        namespace = params.get("namespace", "speechd")
        if not _NAMESPACE.fullmatch(namespace):
            raise DurableError(f"NATS store namespace {namespace!r}: use 1-64 of A-Z a-z 0-9 _ -")
        timeout = _number(params, "timeout", float, _DEFAULT_TIMEOUT_S)
        retry_s = _number(params, "retry", float, _DEFAULT_RETRY_S)
        replicas = _number(params, "replicas", int, 1)
        wanted_shards = _number(params, "shards", int, 0) if "shards" in params else None
        holder: list[NatsStore] = []

        async def on_error(exc: Exception) -> None:
            if isinstance(exc, nats.errors.SlowConsumerError) and holder:
                holder[0]._wake_all()  # a wake-up may have been dropped: everyone re-reads
            log.debug("nats: %r", exc)

        async def on_reconnect() -> None:
            log.info("nats: reconnected to %s", nc.connected_url)
            if holder:
                holder[0]._wake_all()  # wake-ups sent while away are lost: everyone re-reads

        async def on_disconnect() -> None:
            if holder:
                # Answers to requests in flight cannot come over a new connection.
                holder[0]._js.abandon("disconnected from NATS")
                if not holder[0]._closed:
                    log.info("nats: disconnected")

        nc = Client()
        try:
            # nats-py retries a first connection forever when reconnecting is allowed (as it
            # must be later): bound it by the retry budget.
            await asyncio.wait_for(
                nc.connect(
                    servers=servers,
                    name="speechd",
                    connect_timeout=max(1, round(timeout)),
                    allow_reconnect=True,
                    max_reconnect_attempts=-1,
                    reconnect_time_wait=0.25,
                    pending_size=64 * 1024 * 1024,
                    error_cb=on_error,
                    reconnected_cb=on_reconnect,
                    disconnected_cb=on_disconnect,
                ),
                retry_s,
            )
        except (nats.errors.Error, OSError, asyncio.TimeoutError) as exc:
            with contextlib.suppress(nats.errors.Error, OSError):
                await nc.close()
            raise DurableError(f"cannot connect to NATS at {', '.join(servers)}: {exc!r}") from exc
        try:
            if nc.max_payload < REQUIRED_MAX_PAYLOAD:
                raise DurableError(
                    f"the NATS server's max_payload is {nc.max_payload} bytes; speechd needs at"
                    f" least {REQUIRED_MAX_PAYLOAD} (set `max_payload: 2MB` in its config)"
                )
            js = JetStream(nc, timeout=timeout)
            with _translated("opening the NATS store"):
                await js.start()
                shards = await cls._ensure_streams(js, namespace, wanted_shards, replicas, retry_s)
            store = cls(nc, js, _Layout(namespace, shards), retry_s=retry_s, replicas=replicas)
        except BaseException:
            await nc.close()
            raise
        holder.append(store)
        return store

    @classmethod
    async def _ensure_streams(
        cls, js: JetStream, namespace: str, wanted: int | None, replicas: int, retry_s: float
    ) -> int:
        """Make (or check) the JetStream streams; returns the shard count in use."""
        probe = _Layout(namespace, 1)
        existing = await cls._stream_config(js, probe.stream(0), retry_s)
        if existing is not None:
            shards = int((existing.get("metadata") or {}).get("speechd.shards", "0") or 0)
            if shards <= 0:
                raise DurableError(f"JetStream stream {probe.stream(0)} is not a speechd store")
            if wanted is not None and wanted != shards:
                raise DurableError(
                    f"the store in namespace {namespace!r} has {shards} shards, not {wanted}"
                )
        else:
            shards = wanted or _DEFAULT_SHARDS
        layout = _Layout(namespace, shards)
        await asyncio.gather(
            *(cls._ensure_stream(js, layout, k, replicas, retry_s) for k in range(shards))
        )
        return shards

    @staticmethod
    async def _stream_config(js: JetStream, name: str, retry_s: float) -> dict[str, Any] | None:
        async def info() -> dict[str, Any] | None:
            try:
                return (await js.api(f"STREAM.INFO.{name}"))["config"]
            except ApiError as exc:
                if exc.err_code == ERR_STREAM_NOT_FOUND:
                    return None
                raise

        return await _retrying(f"looking up JetStream stream {name}", info, retry_s)

    @classmethod
    async def _ensure_stream(
        cls, js: JetStream, layout: _Layout, shard: int, replicas: int, retry_s: float
    ) -> None:
        name = layout.stream(shard)
        wanted = layout.config(shard, replicas)
        config = await cls._stream_config(js, name, retry_s)
        if config is None:

            async def create() -> dict[str, Any] | None:
                try:
                    return (await js.api(f"STREAM.CREATE.{name}", wanted))["config"]
                except ApiError as exc:
                    if exc.err_code == ERR_STREAM_NAME_IN_USE:  # someone else made it first
                        return None
                    raise

            config = await _retrying(f"creating JetStream stream {name}", create, retry_s)
            if config is None:
                config = await cls._stream_config(js, name, retry_s)
        if config is None:
            raise DurableError(f"JetStream stream {name} vanished while being made")
        for key in ("subjects", "max_msgs_per_subject", "allow_direct", "allow_atomic"):
            if config.get(key) != wanted[key]:
                raise DurableError(
                    f"JetStream stream {name} has {key}={config.get(key)!r}, not"
                    f" {wanted[key]!r}: it was not made by this speechd layout"
                )
        if (config.get("metadata") or {}).get("speechd.layout") != LAYOUT_VERSION:
            raise DurableError(f"JetStream stream {name} has another speechd layout version")

    # -- caches -------------------------------------------------------------------------

    def _remember(self, stream: str, at: _At | None) -> None:
        self._heads[stream] = at
        self._heads.move_to_end(stream)
        if len(self._heads) > _CACHE_SIZE:
            self._heads.popitem(last=False)
        if at is not None:
            self._raise_floor(stream, at.seq, deleted=False)

    def _raise_floor(self, stream: str, seq: int, *, deleted: bool) -> None:
        old = self._floors.get(stream)
        if old is None or seq > old[0] or (seq == old[0] and deleted):
            self._floors[stream] = (seq, deleted)
            self._floors.move_to_end(stream)
            if len(self._floors) > _CACHE_SIZE:
                self._floors.popitem(last=False)

    def _fresh(self, stream: str, at: _At | None) -> bool:
        """Whether a head read from some replica is at least as new as what we know of."""
        floor = self._floors.get(stream)
        if floor is None:
            return True
        seq, deleted = floor
        if at is None:
            return deleted
        return at.seq > seq or (at.seq == seq and not deleted)

    # -- heads --------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed("the store is closed")

    async def _retry(self, doing: str, call: Callable[[], Awaitable[T]]) -> T:
        self._check_open()
        try:
            return await _retrying(doing, call, self._retry_s, self._check_open)
        except WireError as exc:
            raise DurableError(f"{doing} failed: {exc}") from exc

    @staticmethod
    def _decode_head(msg: DirectMsg | None) -> _At | None:
        return None if msg is None else _At(_head_decoder.decode(msg.data), msg.seq)

    async def _leader_head(self, stream: str) -> _At | None:
        """The head as the stream's leader has it (authoritative)."""
        js_stream = self._layout.stream(self._layout.shard(stream))
        subject = self._layout.head_subject(stream)
        found = await self._retry(
            f"reading {stream}'s head", lambda: self._js.msg_get(js_stream, subject)
        )
        at = None if found is None else _At(_head_decoder.decode(found[1]), found[0])
        if at is None:
            floor = self._floors.get(stream)
            if floor is not None:
                self._raise_floor(stream, floor[0], deleted=True)
        self._remember(stream, at)
        return at

    async def _direct_head(self, stream: str) -> _At | None:
        js_stream = self._layout.stream(self._layout.shard(stream))
        subject = self._layout.head_subject(stream)
        msg = await self._retry(
            f"reading {stream}'s head", lambda: self._js.direct_last(js_stream, subject)
        )
        return self._decode_head(msg)

    async def _fresh_head(self, stream: str, first: object = _UNREAD) -> _At | None:
        """A head no older than any this handle has seen (`first`: one already read)."""
        at = await self._direct_head(stream) if first is _UNREAD else first
        for attempt in range(_STALE_TRIES):
            assert at is None or isinstance(at, _At)
            if self._fresh(stream, at):
                self._remember(stream, at)
                return at
            await asyncio.sleep(0.002 * 2**attempt)
            at = await self._direct_head(stream)
        return await self._leader_head(stream)

    # -- appends ------------------------------------------------------------------------

    async def append(
        self,
        stream: str,
        records: Sequence[AppendRecord],
        *,
        match_seq_num: int | None = None,
    ) -> AppendAck:
        validate_name(stream)
        size = check_batch(records)
        self._check_open()
        writer = self._writers.get(stream)
        if writer is None:
            writer = self._writers[stream] = _Writer(self, stream)
        op = _Op(list(records), match_seq_num, size, self._loop.create_future())
        writer.submit(op)
        return await op.future

    async def _commit(self, stream: str, ops: list[_Op]) -> list[AppendAck]:
        """Append `ops` as one atomic batch where the head says; retry lost races."""
        records = [record for op in ops for record in op.records]
        match = ops[0].match if len(ops) == 1 else None
        layout = self._layout
        head_subject = layout.head_subject(stream)
        deadline = self._loop.time() + self._retry_s
        backoff = _Backoff()
        trusted = False  # whether `at` came from the leader just now
        # Every batch this call sent: one whose answer was lost may have landed (even after a
        # later try was refused because of it), and then the head carries its token.
        sent: set[str] = set()
        if stream in self._heads:
            at = self._heads[stream]
        else:
            at, trusted = await self._leader_head(stream), True
        while True:
            self._check_open()
            head = at.head if at is not None else None
            if head is not None and head.token in sent:
                next_seq, ts = head.next - len(records), head.ts
                break
            next_seq = head.next if head is not None else 0
            if match is not None and match != next_seq:
                if not trusted:
                    at, trusted = await self._leader_head(stream), True
                    continue
                raise SeqMismatch(stream, match, next_seq)
            gen = head.gen if head is not None else secrets.token_hex(6)
            ts = max(_now_ms(), head.ts if head is not None else 0)
            token = secrets.token_hex(8)
            sent.add(token)
            new_head = _Head(gen, next_seq + len(records), ts, token)
            messages = [
                (
                    layout.record_subject(stream, gen, next_seq + i),
                    msgspec.msgpack.encode(_Frame(ts, tuple(r.headers), r.body)),
                )
                for i, r in enumerate(records)
            ]
            messages.append((head_subject, _head_encoder.encode(new_head)))
            condition = {
                EXPECTED_LAST_SUBJECT_SEQ: str(at.seq if at is not None else 0),
                EXPECTED_LAST_SUBJECT_SEQ_SUBJECT: head_subject,
            }
            try:
                ack = await self._js.publish_atomic(messages, condition)
            except ApiError as exc:
                if exc.err_code == ERR_BATCH_TOO_LARGE:
                    raise DurableError(
                        f"appending to {stream}: the NATS server refuses a batch of"
                        f" {len(messages)} messages; set `jetstream {{ limits {{ batch"
                        " { max_msgs: 1001 } } }` in its config"
                    ) from exc
                if exc.err_code != ERR_WRONG_LAST_SEQ:
                    if not (exc.transient or exc.err_code == ERR_BATCH_INCOMPLETE):
                        raise DurableError(f"appending to {stream} failed: {exc}") from exc
                    await backoff.wait(deadline, f"appending to {stream}", exc)
                at, trusted = await self._leader_head(stream), True
                continue
            except NoAnswer as exc:
                # The batch may or may not have been stored: the head says which.
                await backoff.wait(deadline, f"appending to {stream} (outcome unknown)", exc)
                at, trusted = await self._leader_head(stream), True
                continue
            at = _At(new_head, ack.seq)
            self._remember(stream, at)
            break
        acks = []
        start = next_seq
        for op in ops:
            acks.append(AppendAck(start, start + len(op.records), ts))
            start += len(op.records)
        return acks

    # -- reads --------------------------------------------------------------------------

    async def read(
        self,
        stream: str,
        seq_num: int = 0,
        *,
        max_records: int = 1000,
        max_bytes: int = MAX_BATCH_BYTES,
        wait: float = 0,
    ) -> ReadBatch:
        validate_name(stream)
        self._check_open()
        if seq_num < 0:
            raise SeqOutOfRange(stream, seq_num, 0)
        max_records = max(1, max_records)
        deadline = self._loop.time() + max(0.0, wait)
        watch = await self._watch(stream) if wait > 0 else None
        try:
            while True:
                self._check_open()
                # Armed before reading, so a head landing between the read and the wait
                # still wakes us.
                waiter = watch.arm() if watch is not None else None
                try:
                    batch = await self._read_now(stream, seq_num, max_records, max_bytes)
                    remaining = deadline - self._loop.time()
                    if batch.records or waiter is None or remaining <= 0:
                        return batch
                    try:
                        await asyncio.wait_for(waiter, remaining)
                    except asyncio.TimeoutError:
                        return batch
                finally:
                    if watch is not None and waiter is not None:
                        watch.waiters.discard(waiter)
        finally:
            if watch is not None:
                self._unwatch(watch)

    async def _read_now(self, stream: str, seq: int, max_records: int, max_bytes: int) -> ReadBatch:
        cached = self._heads.get(stream)
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
                    self._direct_head(stream),
                    self._records(stream, cached.head.gen, seq, window, max_bytes),
                )
                at = await self._fresh_head(stream, first)
            else:
                at = await self._fresh_head(stream)
            tail = at.head.next if at is not None else 0
            if seq > tail:
                raise SeqOutOfRange(stream, seq, tail)
            if seq == tail or at is None:
                return ReadBatch([], tail)
            if msgs is None or at.head.gen != cached.head.gen:  # type: ignore[union-attr]
                window = min(max_records, _READ_WINDOW, tail - seq)
                msgs = await self._records(stream, at.head.gen, seq, window, max_bytes)
            records = _contiguous(msgs, at.head.gen, seq, tail, max_records, max_bytes)
            if records:
                return ReadBatch(records, tail)
            # The head promises records this replica does not have yet: ask again.
            cached = at
            await asyncio.sleep(0.002 * 2**attempt)
        raise DurableError(f"reading {stream}: the store's replicas disagree about seq {seq}")

    async def _records(
        self, stream: str, gen: str, seq: int, count: int, max_bytes: int
    ) -> list[DirectMsg]:
        layout = self._layout
        js_stream = layout.stream(layout.shard(stream))
        subjects = [layout.record_subject(stream, gen, seq + i) for i in range(max(1, count))]
        # The server counts subjects and NATS headers too, and stops after the message that
        # crosses its limit: give it room for every record our own limit could let through.
        server_bytes = max_bytes + len(subjects) * (len(subjects[0]) + 512)
        return await self._retry(
            f"reading {stream}",
            lambda: self._js.direct_multi(js_stream, subjects, max_bytes=server_bytes),
        )

    async def check_tail(self, stream: str) -> int:
        validate_name(stream)
        self._check_open()
        at = await self._fresh_head(stream)
        return at.head.next if at is not None else 0

    # -- wake-ups -----------------------------------------------------------------------

    async def _watch(self, stream: str) -> _Watch:
        watch = self._watches.get(stream)
        if watch is None:
            watch = self._watches[stream] = _Watch(stream)
            try:
                watch.sub = await self._nc.subscribe(
                    self._layout.wake_subject(stream), cb=self._wake_callback(watch)
                )
            except (nats.errors.Error, OSError) as exc:
                del self._watches[stream]
                watch.ready.set_exception(DurableError(f"watching {stream} failed: {exc}"))
                watch.ready.exception()  # retrieved: the waiting readers raise their own
                raise DurableError(f"watching {stream} failed: {exc}") from exc
            watch.ready.set_result(None)
            # A new interest reaches the other servers of a cluster a moment later; a head
            # republished there meanwhile would be missed, so look once more after that.
            self._loop.call_later(_SUB_SETTLE_S, watch.wake)
        else:
            await asyncio.shield(watch.ready)
        if watch.linger is not None:
            watch.linger.cancel()
            watch.linger = None
        watch.refs += 1
        return watch

    def _unwatch(self, watch: _Watch) -> None:
        watch.refs -= 1
        if watch.refs == 0 and not self._closed:
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
                    self._raise_floor(watch.stream, int(deleted), deleted=True)
                elif SEQUENCE in headers:
                    self._raise_floor(watch.stream, int(headers[SEQUENCE]), deleted=False)
            watch.wake()

        return on_wake

    def _wake_all(self) -> None:
        for watch in self._watches.values():
            watch.wake()

    # -- list, delete, sweep ------------------------------------------------------------

    async def _head_names(self, prefix: str) -> list[str]:
        """Every stream name starting with `prefix`, sorted (from the head subjects)."""
        complete, _, _ = prefix.rpartition("/")
        if complete and any(
            not re.fullmatch(r"[A-Za-z0-9_\-.]+", s) or s in (".", "..")
            for s in complete.split("/")
        ):
            return []

        async def names_in(shard: int) -> list[str]:
            root = self._layout.root(shard)
            subject_filter = f"{root}.h.{_escape(complete)}.>" if complete else f"{root}.h.>"
            subjects: list[str] = []
            while True:
                request = {"subjects_filter": subject_filter, "offset": len(subjects)}
                info = await self._retry(
                    "listing streams",
                    lambda r=request: self._js.api(  # type: ignore[misc]
                        f"STREAM.INFO.{self._layout.stream(shard)}", r
                    ),
                )
                page = list((info.get("state", {}).get("subjects") or {}).keys())
                subjects += page
                if not page or len(subjects) >= int(info.get("total", 0) or 0):
                    break
            return [self._layout.name_of_head(shard, s) for s in subjects]

        found = await asyncio.gather(*(names_in(k) for k in range(self._layout.shards)))
        return sorted(name for names in found for name in names if name.startswith(prefix))

    async def _heads_of(self, names: list[str]) -> dict[str, _At]:
        """The current heads of `names` (those that have one)."""
        by_shard: dict[int, list[str]] = {}
        for name in names:
            by_shard.setdefault(self._layout.shard(name), []).append(name)
        heads: dict[str, _At] = {}

        async def fetch(shard: int, page: list[str]) -> None:
            subjects = [self._layout.head_subject(name) for name in page]
            msgs = await self._retry(
                "listing streams",
                lambda: self._js.direct_multi(
                    self._layout.stream(shard), subjects, max_bytes=64 * 1024 * 1024
                ),
            )
            for msg in msgs:
                name = self._layout.name_of_head(shard, msg.subject)
                heads[name] = _At(_head_decoder.decode(msg.data), msg.seq)

        await asyncio.gather(
            *(
                fetch(shard, page[i : i + _LIST_PAGE])
                for shard, page in by_shard.items()
                for i in range(0, len(page), _LIST_PAGE)
            )
        )
        return heads

    async def list(self, prefix: str = "", *, limit: int = 1000) -> list[StreamInfo]:
        self._check_open()
        names = await self._head_names(prefix)
        infos: list[StreamInfo] = []
        start = 0
        while start < len(names) and len(infos) < limit:
            page = names[start : start + limit - len(infos)]
            start += len(page)
            heads = await self._heads_of(page)
            for name in page:
                at = heads.get(name)
                if at is not None:  # deleted since its name was listed
                    infos.append(StreamInfo(name, at.head.next, at.head.ts))
        return infos

    async def delete(self, stream: str) -> bool:
        validate_name(stream)
        self._check_open()
        while True:
            at = await self._leader_head(stream)
            if at is None:
                return False
            if await self._delete_life(stream, at):
                return True
            # An append replaced the head meanwhile: delete the newer life.

    async def _delete_life(self, stream: str, at: _At) -> bool:
        """Remove the life of `stream` whose head is `at`, if that is still its head."""
        js_stream = self._layout.stream(self._layout.shard(stream))
        removed = await self._retry(
            f"deleting {stream}", lambda: self._js.msg_delete(js_stream, at.seq)
        )
        if not removed:
            return False
        self._raise_floor(stream, at.seq, deleted=True)
        self._remember(stream, None)
        try:
            await self._retry(
                f"deleting {stream}'s records",
                lambda: self._js.purge(js_stream, self._layout.records_filter(stream, at.head.gen)),
            )
        except DurableError:
            # The stream is gone (its head is); its records are unreachable garbage.
            log.warning("store: %s deleted, but purging its records failed", stream)
        with contextlib.suppress(nats.errors.Error):
            await self._nc.publish(
                self._layout.wake_subject(stream), b"", headers={H_DELETED: str(at.seq)}
            )
        return True

    async def sweep(self, max_age_s: float, prefixes: Sequence[str]) -> int:
        self._check_open()
        cutoff = _now_ms() - int(max_age_s * 1000)
        names: set[str] = set()
        for prefix in dict.fromkeys(prefixes):
            names.update(await self._head_names(prefix))
        heads = await self._heads_of(sorted(names))
        doomed = [(name, at) for name, at in heads.items() if at.head.ts < cutoff]
        limit = asyncio.Semaphore(_SWEEP_CONCURRENCY)

        async def remove(name: str, at: _At) -> bool:
            async with limit:
                return await self._delete_life(name, at)

        removed = await asyncio.gather(*(remove(name, at) for name, at in doomed))
        return sum(removed)

    # -- closing ------------------------------------------------------------------------

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for watch in self._watches.values():
            watch.wake(StoreClosed("the store is closed"))
            if watch.linger is not None:
                watch.linger.cancel()
        writers = [w.task for w in self._writers.values() if w.task is not None]
        if writers:
            _, pending = await asyncio.wait(writers, timeout=self._js.timeout)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        with contextlib.suppress(nats.errors.Error, OSError):
            await self._js.close()
        with contextlib.suppress(nats.errors.Error, OSError):
            await self._nc.close()


def _contiguous(
    msgs: list[DirectMsg], gen: str, seq: int, tail: int, max_records: int, max_bytes: int
) -> list[Record]:
    """The records `seq`, `seq + 1`, ... of life `gen` found in `msgs`, below `tail`, within
    `max_records` and `max_bytes` (at least one if `seq` is there)."""
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
        size += len(frame.body) + sum(len(k) + len(v) for k, v in frame.headers)
        if records and size > max_bytes:
            break
        records.append(Record(n, frame.ts, frame.headers, frame.body))
        n += 1
    return records


class _Backoff:
    """Growing, jittered sleeps between attempts, within a deadline."""

    def __init__(self) -> None:
        self._delay = 0.005

    async def wait(self, deadline: float, doing: str, cause: Exception) -> None:
        loop = asyncio.get_running_loop()
        delay = self._delay * random.uniform(0.5, 1.5)
        if loop.time() + delay > deadline:
            raise DurableError(f"{doing}: gave up: {cause}") from cause
        await asyncio.sleep(delay)
        self._delay = min(self._delay * 2, 0.5)


async def _retrying(
    doing: str,
    call: Callable[[], Awaitable[T]],
    retry_s: float,
    check: Callable[[], None] | None = None,
) -> T:
    """`call()`, again after `NoAnswer` or a transient JetStream error, for up to `retry_s`."""
    deadline = asyncio.get_running_loop().time() + retry_s
    backoff = _Backoff()
    while True:
        if check is not None:
            check()
        try:
            return await call()
        except NoAnswer as exc:
            await backoff.wait(deadline, doing, exc)
        except ApiError as exc:
            if not exc.transient:
                raise
            await backoff.wait(deadline, doing, exc)
