"""The NATS JetStream backend: every speechd stream is a handful of subjects in a few JetStream
streams, so many hosts share one set of streams on a replicated engine.

    nats://host:port[,host:port...][/?namespace=NS&shards=N&replicas=R&timeout=S&retry=S]

`namespace` (default `speechd`) keeps deployments on one NATS apart; `shards` (default 4, then
whatever the existing streams say) and `replicas` (default 1; 3 for R3) apply when the
JetStream streams are first made. `timeout` is one request's limit (default 5 s); a request
that fails for want of an answer or a leader is retried for up to `retry` s (default 60).

Its parts, each readable alone:

    _nats_layout   subjects, escaping, frames, the JetStream stream config (persisted: keep
                   them stable)
    _nats_writer   limits from the server's, batches, the conditional commit, lost answers,
                   trim
    _nats_reader   heads and their freshness, record windows, wake-up watches
    _nats_wire     the JetStream requests, thinly; _nats_retry their retries
    _nats          this facade: opening, and list, delete, sweep

**Server.** nats-server 2.12 or newer with JetStream; nothing speechd-specific. The store
sizes records and appends to what the server takes (`_nats_writer.limits_for`: its
`max_payload`, and its atomic batch size, which a probe it refuses reveals) and reports them
in `limits`. Recommended, for durability as strong as the embedded store's: `jetstream {
sync_interval: always }`; opening logs how the server syncs where the server says (its
`varz`, which only an account the operator exports it to may read). `max_payload: 2MB` and
`jetstream { limits { batch { max_msgs: 1001 } } }` raise the limits to the contract's.

**Follow** is reads in a loop; each record costs one republished head (pushed) and one round
trip. **Delete** removes the head message by its sequence (so it removes exactly the life it
read; a concurrent append makes it look again), then purges that life's records; if the
deleter dies between the two, the records are unreachable garbage. **Sweep** lists heads and
deletes, a few at a time and paced, each one whose timestamp is older than the cutoff, by that
head's sequence: an append landing meanwhile replaced the head, so that stream survives.
**list** reads head subject names from stream info (`subjects_filter` on the complete name
segments of the prefix), then the heads of up to `limit` names in `multi_last` requests.

Costs (R1, one handle): append = n+1 messages, 1 round trip (plus 1 leader read when the head
is not cached or a condition fails); read = 2 messages out, k+2 back, 1 round trip; check_tail
= 1 round trip; follow = 1 pushed head + 1 round trip per append; trim = 2-3 requests; list =
1 stream-info request per shard + 1 direct get per 1000 streams; delete = 3 requests. The
server keeps one subject per record in its index (~100 bytes of memory each).

Clock: a record's timestamp is the appender's clock, raised to the previous head's timestamp,
so it never goes back within a stream; keep hosts' clocks in sync for sweeps to be fair.
Across handles that share nothing, on R3, a read can briefly lag a write acknowledged
elsewhere (conditional appends are always checked by the leader).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Sequence
from typing import Final

import nats
import nats.errors
from nats.aio.client import Client

from ._contract import (
    MAX_BATCH_RECORDS,
    SWEEP_PAGE,
    AppendAck,
    AppendRecord,
    DurableError,
    Limits,
    ReadBatch,
    Spare,
    StoreClosed,
    StreamInfo,
    check_batch,
    validate_name,
)
from ._nats_config import NAMESPACE, number, parse_url, report_sync
from ._nats_layout import H_DELETED, LAYOUT_VERSION, Layout, ensure_streams
from ._nats_reader import At, Heads, Reader
from ._nats_retry import Retry, retrying
from ._nats_wire import JetStream, WireError
from ._nats_writer import MIN_MAX_PAYLOAD, Committer, Op, Writers, limits_for
from ._polling import PolledStore, Wakeup

__all__ = ["H_DELETED", "LAYOUT_VERSION", "NatsStore"]

log = logging.getLogger("speechd.durable")

_DEFAULT_TIMEOUT_S = 5.0
_DEFAULT_RETRY_S = 60.0
_DEFAULT_BATCH_MSGS: Final = 1000  # the server's default, if its probe answer says nothing
_VARZ_TIMEOUT_S = 1.0
_SEGMENT = re.compile(r"[A-Za-z0-9_\-.]+")
_LIST_PAGE = 1000  # heads per multi_last request (the server answers at most 1024)
_SWEEP_PAGE = SWEEP_PAGE  # heads a sweep looks at, at a time
_SWEEP_CONCURRENCY = 4  # deletes of a sweep in flight at once


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class NatsStore(PolledStore):
    """The stream store on NATS JetStream. Open with `await NatsStore.open(url)`."""

    def __init__(
        self, nc: Client, js: JetStream, layout: Layout, *, retry_s: float, limits: Limits
    ) -> None:
        """Use `open`, which connects, makes the JetStream streams and learns the limits."""
        self._nc = nc
        self._js = js
        self._layout = layout
        self._closed = False
        self._retry = Retry(retry_s, self._check_open)
        self._heads = Heads(js, layout, self._retry)
        self._reader = Reader(nc, js, layout, self._heads, self._retry, lambda: self._closed)
        committer = Committer(js, layout, self._heads, self._retry, limits, nc.max_payload)
        self._committer = committer
        self._writers = Writers(committer, lambda: js.timeout)

    # -- opening ------------------------------------------------------------------------

    @classmethod
    async def open(cls, url: str) -> NatsStore:
        servers, params = parse_url(url)
        namespace = params.get("namespace", "speechd")
        if not NAMESPACE.fullmatch(namespace):
            raise DurableError(f"NATS store namespace {namespace!r}: use 1-64 of A-Z a-z 0-9 _ -")
        timeout = number(params, "timeout", float, _DEFAULT_TIMEOUT_S)
        retry_s = number(params, "retry", float, _DEFAULT_RETRY_S)
        replicas = number(params, "replicas", int, 1)
        wanted_shards = number(params, "shards", int, 0) if "shards" in params else None
        holder: list[NatsStore] = []

        async def on_error(exc: Exception) -> None:
            if isinstance(exc, nats.errors.SlowConsumerError) and holder:
                holder[0]._reader.wake_all()  # a wake-up may have been dropped: re-read
            log.debug("nats: %r", exc)

        async def on_reconnect() -> None:
            log.info("nats: reconnected to %s", nc.connected_url)
            if holder:
                holder[0]._reader.wake_all()  # wake-ups sent while away are lost: re-read

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
            if nc.max_payload < MIN_MAX_PAYLOAD:
                raise DurableError(
                    f"the NATS server's max_payload is {nc.max_payload} bytes; speechd needs"
                    f" at least {MIN_MAX_PAYLOAD}"
                )
            js = JetStream(nc, timeout=timeout)
            try:
                await js.start()
                layout = await ensure_streams(js, namespace, wanted_shards, replicas, retry_s)
                batch_msgs = await cls._batch_size(js, layout, retry_s)
                report_sync(await js.server_varz(_VARZ_TIMEOUT_S))
            except WireError as exc:
                raise DurableError(f"opening the NATS store failed: {exc}") from exc
            limits = limits_for(nc.max_payload, batch_msgs)
            log.debug("store: NATS limits %s", limits)
            store = cls(nc, js, layout, retry_s=retry_s, limits=limits)
        except BaseException:
            await nc.close()
            raise
        holder.append(store)
        return store

    @staticmethod
    async def _batch_size(js: JetStream, layout: Layout, retry_s: float) -> int:
        """The server's atomic batch size (messages), at most what an append can use."""
        found = await retrying(
            "asking the NATS server its batch size",
            lambda: js.batch_limit(layout.probe_subject()),
            retry_s,
        )
        batch_msgs = min(found or _DEFAULT_BATCH_MSGS, MAX_BATCH_RECORDS + 1)
        if batch_msgs < 2:
            raise DurableError(f"the NATS server's atomic batches hold {batch_msgs} message")
        return batch_msgs

    @property
    def limits(self) -> Limits:
        return self._committer.limits

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed("the store is closed")

    # -- appends, trims, reads ----------------------------------------------------------

    async def append(
        self,
        stream: str,
        records: Sequence[AppendRecord],
        *,
        match_seq_num: int | None = None,
    ) -> AppendAck:
        validate_name(stream)
        size = check_batch(records, self.limits)
        self._check_open()
        future: asyncio.Future[AppendAck] = asyncio.get_running_loop().create_future()
        self._writers.submit(stream, Op(list(records), match_seq_num, size, future))
        return await future

    async def trim(self, stream: str, before_seq: int) -> int:
        validate_name(stream)
        self._check_open()
        return await self._committer.trim(stream, before_seq)

    async def _read_now(
        self, stream: str, seq_num: int, max_records: int, max_bytes: int, bodies: bool
    ) -> ReadBatch:
        return await self._reader.read_now(stream, seq_num, max_records, max_bytes, bodies)

    def _wakeups(self, stream: str) -> contextlib.AbstractAsyncContextManager[Wakeup]:
        return self._reader.wakeups(stream)

    async def check_tail(self, stream: str) -> int:
        validate_name(stream)
        self._check_open()
        at = await self._heads.fresh(stream)
        return at.head.next if at is not None else 0

    # -- list, delete, sweep ------------------------------------------------------------

    async def _head_names(self, prefix: str) -> list[str]:
        """Every stream name starting with `prefix`, sorted (from the head subjects)."""
        complete, _, _ = prefix.rpartition("/")
        if complete and any(
            not _SEGMENT.fullmatch(s) or s in (".", "..") for s in complete.split("/")
        ):
            return []

        async def names_in(shard: int) -> list[str]:
            subject_filter = self._layout.heads_filter(shard, complete)
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

    async def _heads_of(self, names: list[str]) -> dict[str, At]:
        """The current heads of `names` (those that have one)."""
        by_shard: dict[int, list[str]] = {}
        for name in names:
            by_shard.setdefault(self._layout.shard(name), []).append(name)
        heads: dict[str, At] = {}

        async def fetch(shard: int, page: list[str]) -> None:
            subjects = [self._layout.head_subject(name) for name in page]
            msgs = await self._retry(
                "listing streams",
                lambda: self._js.direct_multi(
                    self._layout.stream(shard), subjects, max_bytes=64 * 1024 * 1024
                ),
            )
            for msg in msgs:
                at = Heads.decode(msg)
                assert at is not None
                heads[self._layout.name_of_head(shard, msg.subject)] = at

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
                    infos.append(StreamInfo(name, at.head.next, at.head.ts, at.head.first))
        return infos

    async def delete(self, stream: str) -> bool:
        validate_name(stream)
        self._check_open()
        while True:
            at = await self._heads.leader(stream)
            if at is None:
                return False
            if await self._delete_life(stream, at):
                return True
            # An append replaced the head meanwhile: delete the newer life.

    async def _delete_life(self, stream: str, at: At) -> bool:
        """Remove the life of `stream` whose head is `at`, if that is still its head."""
        js_stream = self._layout.stream_of(stream)
        removed = await self._retry(
            f"deleting {stream}", lambda: self._js.msg_delete(js_stream, at.seq)
        )
        if not removed:
            return False
        self._heads.raise_floor(stream, at.seq, deleted=True)
        self._heads.remember(stream, None)
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

    async def sweep(
        self, max_age_s: float, prefixes: Sequence[str], *, spare: Spare | None = None
    ) -> int:
        self._check_open()
        loop = asyncio.get_running_loop()
        cutoff = _now_ms() - int(max_age_s * 1000)
        names: set[str] = set()
        for prefix in dict.fromkeys(prefixes):
            names.update(await self._head_names(prefix))
        ordered = sorted(names)
        room = asyncio.Semaphore(_SWEEP_CONCURRENCY)

        async def remove(name: str, at: At) -> bool:
            # A few at a time, each followed by a pause as long as it took: a shard's purges
            # hold its stream's lock, and appends to that shard wait behind them.
            async with room:
                started = loop.time()
                removed = await self._delete_life(name, at)
                await asyncio.sleep(loop.time() - started)
                return removed

        removed = 0
        for i in range(0, len(ordered), _SWEEP_PAGE):
            heads = await self._heads_of(ordered[i : i + _SWEEP_PAGE])
            doomed = [(name, at) for name, at in heads.items() if at.head.ts < cutoff]
            if spare is not None and doomed:
                kept = await spare([name for name, _ in doomed])
                doomed = [(name, at) for name, at in doomed if name not in kept]
            removed += sum(await asyncio.gather(*(remove(name, at) for name, at in doomed)))
        return removed

    # -- closing ------------------------------------------------------------------------

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._reader.close(StoreClosed("the store is closed"))
        await self._writers.close()
        with contextlib.suppress(nats.errors.Error, OSError):
            await self._js.close()
        with contextlib.suppress(nats.errors.Error, OSError):
            await self._nc.close()
