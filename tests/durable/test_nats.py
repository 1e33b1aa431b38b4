"""What belongs to the NATS backend alone: its own servers killed and restarted, a lost
acknowledgement, its configuration checks, and its layout's corners.

The contract itself is checked by the shared suite (the `nats` entry of `BACKENDS`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from harness.nats import NatsServer
from speechd.durable import (
    MAX_BATCH_RECORDS,
    MAX_BODY_BYTES,
    MAX_HEADER_BYTES,
    AppendRecord,
    DurableError,
    Record,
    RecordTooLarge,
    Store,
    open_store,
)
from speechd.durable import _nats as nats_backend
from speechd.durable._contract import MAX_NAME_BYTES
from speechd.durable._nats_wire import JetStream, NoAnswer
from speechd.durable._nats_writer import limits_for

from . import test_crash
from ._support import read_all, rec

pytestmark = pytest.mark.nats


@pytest.fixture
def server(tmp_path: Path) -> Iterator[NatsServer]:
    """A server of this test's own, to kill and restart."""
    server = NatsServer(tmp_path).start()
    yield server
    server.stop()


@pytest.fixture
async def url(server: NatsServer) -> AsyncIterator[str]:
    yield f"{server.url}/?namespace=t&shards=2&retry=30"


def _bodies(records: list[Record]) -> list[bytes]:
    return [r.body for r in records]


# -- restarts and crashes of the server ---------------------------------------------------


@pytest.mark.slow
async def test_a_server_killed_and_restarted_keeps_every_acknowledged_record(
    server: NatsServer, url: str
) -> None:
    """SIGKILL the server (sync_interval: always): what was acknowledged is there after the
    restart, and handles that stayed open (a writer, a waiting follower) carry on."""
    writer = await open_store(url)
    follower = await open_store(url)
    try:
        await writer.append("pub/casts/x", [rec(b"meta")], match_seq_num=0)
        for i in range(20):
            await writer.append("pub/casts/x", [rec(b"%d" % i), rec(b"%d+" % i)])
        await writer.append("jobs", [rec(b"job")])
        seen: list[int] = []
        all_seen = asyncio.Event()

        async def follow() -> None:
            async for record in follower.follow("pub/casts/x"):
                seen.append(record.seq_num)
                if record.body == b"last":
                    all_seen.set()

        task = asyncio.ensure_future(follow())
        await asyncio.sleep(0.2)
        server.kill()
        await asyncio.sleep(0.3)
        server.start()
        # The writer's handle reconnects; appends made after the restart land after the rest.
        ack = await writer.append("pub/casts/x", [rec(b"last")], match_seq_num=41)
        assert ack.start_seq == 41
        await asyncio.wait_for(all_seen.wait(), 30)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert seen == list(range(42))
    finally:
        await writer.close()
        await follower.close()
    async with await open_store(url) as reopened:
        records = await read_all(reopened, "pub/casts/x")
        expected = [b"meta"] + [b for i in range(20) for b in (b"%d" % i, b"%d+" % i)]
        assert _bodies(records) == [*expected, b"last"]
        assert _bodies(await read_all(reopened, "jobs")) == [b"job"]
        assert [s.name for s in await reopened.list()] == ["jobs", "pub/casts/x"]


@pytest.mark.slow
async def test_acknowledged_appends_survive_server_sigkills_at_random_moments(
    server: NatsServer, url: str
) -> None:
    """The crash appender of the shared suite keeps appending while its *server* is killed
    (mid-batch, mid-commit, between the commit and its acknowledgement) and restarted: every
    acknowledged batch survives whole, nothing torn shows, seqs stay dense."""
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    print(f"server crash seed {seed}")
    rng.seed(seed)
    child = test_crash.Child(url, "s", rng.randrange(1 << 30))
    try:
        assert await asyncio.to_thread(child.ready.wait, 60), "child never got ready"
        for _ in range(6):
            await asyncio.sleep(rng.uniform(0.1, 0.6))
            server.kill()
            await asyncio.sleep(rng.uniform(0.0, 0.3))
            server.start()
        await asyncio.sleep(0.5)
    finally:
        acked = child.kill()
    assert len(acked) > 20, "the child got little done"
    async with await open_store(url) as store:
        await test_crash.settle(store)
        checked = await test_crash.check_store(store, acked)
    assert checked >= sum(a.next - a.start for a in acked)


# -- an acknowledgement lost on the way -----------------------------------------------------


@pytest.mark.parametrize("conditional", [False, True])
async def test_an_append_whose_acknowledgement_is_lost_lands_once(
    url: str, monkeypatch: pytest.MonkeyPatch, conditional: bool
) -> None:
    """The batch is stored but its PubAck never comes: the append finds its own head (by its
    token) and reports success, without appending twice."""
    original = JetStream.publish_atomic
    lost = 0

    async def ack_lost(self: JetStream, *args: object, **kwargs: object) -> object:
        nonlocal lost
        await original(self, *args, **kwargs)  # type: ignore[arg-type]
        if lost < 2:
            lost += 1
            raise NoAnswer("simulated: the acknowledgement was lost")
        return await original(self, *args, **kwargs)  # type: ignore[arg-type]

    async with await open_store(url) as store:
        await store.append("s", [rec(b"0")])
        monkeypatch.setattr(JetStream, "publish_atomic", ack_lost)
        match = 1 if conditional else None
        ack = await store.append("s", [rec(b"1"), rec(b"2")], match_seq_num=match)
        assert (ack.start_seq, ack.next_seq) == (1, 3)
        ack = await store.append("s", [rec(b"3")], match_seq_num=3 if conditional else None)
        assert (ack.start_seq, ack.next_seq) == (3, 4)
        assert lost == 2
        assert _bodies(await read_all(store, "s")) == [b"0", b"1", b"2", b"3"]


@pytest.mark.parametrize("conditional", [False, True])
async def test_an_append_whose_batch_lands_late_lands_once(
    url: str, monkeypatch: pytest.MonkeyPatch, conditional: bool
) -> None:
    """The first batch's answer is lost and it is stored only later (a server slow to commit
    it): the head read after the loss is still the old one, so the append tries again, and
    that try is refused because the late batch took its place. The append must see its own
    earlier batch in the head then, not try a third time or call it a lost race."""
    original = JetStream.publish_atomic
    late: list[tuple[object, ...]] = []

    async def lands_late(self: JetStream, *args: object, **kwargs: object) -> object:
        if not late:
            late.append(args)
            raise NoAnswer("simulated: no answer yet")
        if len(late) == 1:
            late.append(args)
            await original(self, *late[0])  # type: ignore[arg-type]
        return await original(self, *args, **kwargs)  # type: ignore[arg-type]

    async with await open_store(url) as store:
        await store.append("s", [rec(b"0")])
        monkeypatch.setattr(JetStream, "publish_atomic", lands_late)
        ack = await store.append(
            "s", [rec(b"1"), rec(b"2")], match_seq_num=1 if conditional else None
        )
        assert (ack.start_seq, ack.next_seq) == (1, 3)
        assert len(late) == 2  # the lost try and the refused one
        assert _bodies(await read_all(store, "s")) == [b"0", b"1", b"2"]


async def test_a_delete_racing_an_append_deletes_the_newer_life(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process appends between the delete's read of the head and its removal of that
    head's message (gone: the server keeps one message per head subject): the delete looks
    again and removes the newer life instead of failing."""
    original = JetStream.msg_delete
    raced: list[int] = []
    async with await open_store(url) as store, await open_store(url) as other:

        async def append_first(self: JetStream, stream: str, seq: int) -> bool:
            if not raced:
                raced.append(seq)
                await other.append("s", [rec(b"1")])
            return await original(self, stream, seq)

        await store.append("s", [rec(b"0")])
        monkeypatch.setattr(JetStream, "msg_delete", append_first)
        assert await store.delete("s")
        assert raced
        assert await store.check_tail("s") == 0
        assert await other.list() == []


# -- configuration ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("max_payload", "batch_msgs"), [("1MB", 1000), ("256KB", 50), ("4MB", 5000)]
)
async def test_the_limits_follow_the_servers(
    tmp_path: Path, max_payload: str, batch_msgs: int
) -> None:
    """Records and appends are sized to the server's max_payload and atomic batch size, and
    a record of exactly the largest size fits in one message of the server's."""
    server = NatsServer(tmp_path, max_payload=max_payload, batch_msgs=batch_msgs).start()
    try:
        async with await open_store(f"{server.url}/?namespace=t") as store:
            payload = {"1MB": 1 << 20, "256KB": 256 << 10, "4MB": 4 << 20}[max_payload]
            assert store.limits == limits_for(payload, batch_msgs)
            limits = store.limits
            assert limits.max_batch_records == min(batch_msgs - 1, MAX_BATCH_RECORDS)
            if payload < 2 << 20:
                assert limits.max_record_bytes < payload
            else:
                assert limits.max_record_bytes == MAX_BODY_BYTES + MAX_HEADER_BYTES
            # The largest record, with the longest name and as many headers as allowed.
            name = "n" * MAX_NAME_BYTES
            headers = tuple((b"k%d" % i, b"") for i in range(limits.max_headers))
            room = limits.max_record_bytes - sum(len(k) for k, _ in headers)
            body = b"b" * min(room, limits.max_body_bytes)
            await store.append(name, [AppendRecord(body, headers)], match_seq_num=0)
            await store.append(name, [rec(b"%d" % i) for i in range(limits.max_batch_records)])
            records = await read_all(store, name)
            assert (records[0].body, records[0].headers) == (body, headers)
            assert len(records) == limits.max_batch_records + 1
            with pytest.raises(RecordTooLarge):
                await store.append(name, [rec(b"x")] * (limits.max_batch_records + 1))
    finally:
        server.stop()


async def test_a_server_without_room_for_a_useful_record_is_refused(tmp_path: Path) -> None:
    small = NatsServer(tmp_path, max_payload="32KB").start()
    try:
        with pytest.raises(DurableError, match="max_payload"):
            await open_store(f"{small.url}/?namespace=t")
    finally:
        small.stop()


def _varz_export() -> str:
    """An operator's config that lets the application's account read the server's varz."""
    return (
        "accounts {\n"
        "  SYS: { users: [{user: sys, password: sys}],"
        ' exports: [{service: "$SYS.REQ.SERVER.PING.VARZ"}] }\n'
        "  APP: { jetstream: enabled, users: [{user: app, password: app}],"
        ' imports: [{service: {account: SYS, subject: "$SYS.REQ.SERVER.PING.VARZ"}}] }\n'
        "}\nsystem_account: SYS\nno_auth_user: app\n"
    )


@pytest.mark.parametrize(
    ("setup", "level", "says"),
    [
        ("stock", logging.INFO, "does not say"),
        ("varz, always", logging.INFO, "syncs every write"),
        ("varz, default", logging.WARNING, "every 120 s"),
    ],
)
async def test_opening_says_how_the_server_syncs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, setup: str, level: int, says: str
) -> None:
    extra = _varz_export() if setup.startswith("varz") else ""
    server = NatsServer(
        tmp_path, stock=setup == "stock", sync_always=setup != "varz, default", extra=extra
    ).start()
    try:
        with caplog.at_level(logging.INFO, logger="speechd.durable"):
            async with await open_store(f"{server.url}/?namespace=t"):
                pass
        lines = [r for r in caplog.records if "sync" in r.getMessage()]
        assert len(lines) == 1
        assert lines[0].levelno == level and says in lines[0].getMessage()
    finally:
        server.stop()


async def test_the_shard_count_is_fixed_by_the_first_opener(server: NatsServer) -> None:
    async with await open_store(f"{server.url}/?namespace=s&shards=3") as first:
        await first.append("a", [rec(b"x")])
    with pytest.raises(DurableError, match="3 shards"):
        await open_store(f"{server.url}/?namespace=s&shards=2")
    async with await open_store(f"{server.url}/?namespace=s") as adopted:
        assert _bodies(await read_all(adopted, "a")) == [b"x"]
    # Another namespace on the same server is another store.
    async with await open_store(f"{server.url}/?namespace=other&shards=1") as other:
        assert await other.list() == []


@pytest.mark.parametrize(
    "bad",
    [
        "nats://",
        "nats://127.0.0.1:1/?namespace=a.b",
        "nats://127.0.0.1:1/?shards=zero",
        "nats://127.0.0.1:1/?shards=0",
        "nats://127.0.0.1:1/?colour=blue",
        "nats://127.0.0.1:1/some/path",
    ],
)
async def test_malformed_urls_are_refused(bad: str) -> None:
    with pytest.raises(DurableError):
        await open_store(bad)


async def test_an_unreachable_server_is_a_durable_error(tmp_path: Path) -> None:
    from harness.nats import free_port

    with pytest.raises(DurableError, match="cannot connect"):
        await open_store(f"nats://127.0.0.1:{free_port()}/?timeout=1&retry=2")


async def test_the_streams_are_made_as_documented(server: NatsServer, url: str) -> None:
    async with await open_store(url) as store:
        await store.append("pub/casts/a.b", [rec(b"x")])
    nc = await nats.connect(server.url)
    try:
        response = await nc.request("$JS.API.STREAM.INFO.speechd_t_0", b"", 5)
        config = json.loads(response.data)["config"]
    finally:
        await nc.close()
    assert config["subjects"] == ["speechd.t.0.>"]
    assert config["max_msgs_per_subject"] == 1
    assert config["allow_atomic"] and config["allow_direct"]
    assert config["storage"] == "file"
    assert config["metadata"]["speechd.layout"] == nats_backend.LAYOUT_VERSION
    assert config["metadata"]["speechd.shards"] == "2"
    assert config["republish"] == {"src": "speechd.t.0.h.>", "dest": "speechd-wake.t.h.>"}


# -- the layout's corners ---------------------------------------------------------------


async def test_names_that_differ_only_by_dots_and_slashes_stay_apart(url: str) -> None:
    names = ["a.b/c", "a/b.c", "a/b/c", "a.b.c", "a/b", "a.b", "a", "a-b/c_d"]
    async with await open_store(url) as store:
        for name in dict.fromkeys(names):
            await store.append(name, [rec(name.encode())])
        for name in dict.fromkeys(names):
            assert _bodies(await read_all(store, name)) == [name.encode()]
        listed = [s.name for s in await store.list()]
        assert listed == sorted(dict.fromkeys(names))
        assert [s.name for s in await store.list("a/")] == ["a/b", "a/b.c", "a/b/c"]
        assert [s.name for s in await store.list("a.b")] == ["a.b", "a.b.c", "a.b/c"]
        assert [s.name for s in await store.list("a/b/")] == ["a/b/c"]


async def test_a_long_stream_is_read_in_windows(url: str) -> None:
    async with await open_store(url) as store:
        for start in range(0, 1500, 500):
            await store.append("long", [rec(b"%d" % i) for i in range(start, start + 500)])
        first = await store.read("long", 0)
        assert 1 <= len(first.records) <= 1000 and first.tail == 1500
        middle = await store.read("long", 1234, max_records=3)
        assert _bodies(middle.records) == [b"1234", b"1235", b"1236"]
        assert _bodies(await read_all(store, "long")) == [b"%d" % i for i in range(1500)]


async def test_a_handle_that_never_saw_a_stream_reads_its_newest_life(url: str) -> None:
    """A deleted and re-made stream: a handle whose cache knows the old life reads the new."""
    async with await open_store(url) as a, await open_store(url) as b:
        await a.append("s", [rec(b"old0"), rec(b"old1"), rec(b"old2")])
        assert _bodies(await read_all(b, "s")) == [b"old0", b"old1", b"old2"]
        await a.delete("s")
        await a.append("s", [rec(b"new0")])
        assert _bodies(await read_all(b, "s")) == [b"new0"]
        assert await b.check_tail("s") == 1
        ack = await b.append("s", [rec(b"new1")], match_seq_num=1)
        assert ack.start_seq == 1


async def test_many_streams_list_in_pages(url: str) -> None:
    async with await open_store(url) as store:
        names = [f"pub/casts/{i:05d}" for i in range(2100)]
        # In bounded waves: 2100 batches at once would queue at the server for longer than
        # one request's timeout on a slow disk, and this test is about listing.
        room = asyncio.Semaphore(64)

        async def make(name: str) -> None:
            async with room:
                await store.append(name, [rec()])

        await asyncio.gather(*(make(n) for n in names))
        assert [s.name for s in await store.list("pub/casts/", limit=5000)] == names
        assert [s.name for s in await store.list("pub/casts/0", limit=1500)] == names[:1500]
        assert await store.sweep(3600, ["pub/"]) == 0
        assert await store.sweep(0, ["pub/casts/01"]) == 1000
        assert len(await store.list("pub/", limit=5000)) == 1100


async def test_store_closed_mid_append_fails_the_queued_ones(url: str) -> None:
    store: Store = await open_store(url)
    appends = [asyncio.ensure_future(store.append("q", [rec(b"%d" % i)])) for i in range(50)]
    await asyncio.sleep(0)
    await store.close()
    results = await asyncio.gather(*appends, return_exceptions=True)
    done = [r for r in results if not isinstance(r, BaseException)]
    assert all(isinstance(r, DurableError) for r in results if isinstance(r, BaseException))
    async with await open_store(url) as reopened:
        assert len(await read_all(reopened, "q")) == len(done)


async def test_a_record_body_is_a_record_frame_not_nats_headers(url: str) -> None:
    """Header names and values are arbitrary bytes, which NATS headers could not carry."""
    awkward = ((b"Nats-Expected-Last-Subject-Sequence", b"0"), (b"\r\n:", b"\x00\r\n"))
    async with await open_store(url) as store:
        await store.append("s", [AppendRecord(b"body", awkward)])
        assert (await store.read("s")).records[0].headers == awkward


async def test_a_reader_cancelled_while_its_watch_is_made_strands_no_later_reader(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 20: a long poll cancelled (its client gone) while the stream's wake-up
    subscription was being made left a watch whose `ready` never resolved, so every later
    long poll of that stream on the handle waited for ever."""
    original = Client.subscribe
    gate = asyncio.Event()
    made = 0

    async def slow_subscribe(self: Client, subject: str, *args: Any, **kwargs: Any) -> Any:
        nonlocal made
        if subject.startswith("speechd-wake."):
            made += 1
            if made == 1:
                await gate.wait()  # the first subscription takes its time
        return await original(self, subject, *args, **kwargs)

    async with await open_store(url) as store, await open_store(url) as writer:
        monkeypatch.setattr(Client, "subscribe", slow_subscribe)
        first = asyncio.ensure_future(store.read("s", 0, wait=30))
        await asyncio.sleep(0.05)
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)
        gate.set()
        for seq in range(2):
            later = asyncio.ensure_future(store.read("s", seq, wait=30))
            await asyncio.sleep(0.05)
            await writer.append("s", [rec(b"%d" % seq)])
            batch = await asyncio.wait_for(later, 10)
            assert [r.body for r in batch.records] == [b"%d" % seq]
        assert made == 1  # one subscription, shared by the later readers
