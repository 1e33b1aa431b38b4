"""The store contract (speechd/durable/_contract.py), checked on every backend."""

from __future__ import annotations

import asyncio
import time

import pytest

from speechd.durable import (
    MAX_BATCH_BYTES,
    MAX_BATCH_RECORDS,
    MAX_BODY_BYTES,
    MAX_HEADER_BYTES,
    AppendRecord,
    Limits,
    Record,
    RecordTooLarge,
    SeqMismatch,
    SeqOutOfRange,
    Store,
)
from speechd.durable._contract import (
    MAX_HEADERS,
    MAX_NAME_BYTES,
    InvalidStreamName,
    StoreClosed,
    record_size,
)

from ._support import OpenHandle, read_all, rec

# -- appends ---------------------------------------------------------------------------------


async def test_seqs_are_dense_from_zero(store: Store) -> None:
    first = await store.append("s", [rec(b"a")])
    assert (first.start_seq, first.next_seq) == (0, 1)
    second = await store.append("s", [rec(b"b"), rec(b"c"), rec(b"d")])
    assert (second.start_seq, second.next_seq) == (1, 4)
    records = await read_all(store, "s")
    assert [r.seq_num for r in records] == [0, 1, 2, 3]
    assert [r.body for r in records] == [b"a", b"b", b"c", b"d"]
    assert await store.check_tail("s") == 4


async def test_streams_are_independent(store: Store) -> None:
    await store.append("a", [rec(b"1"), rec(b"2")])
    ack = await store.append("a/b", [rec(b"3")])
    assert ack.start_seq == 0
    assert await store.check_tail("a") == 2
    assert await store.check_tail("a/b") == 1


async def test_timestamps_are_set_by_the_store_and_never_go_back(store: Store) -> None:
    before = time.time_ns() // 1_000_000
    acks = [await store.append("s", [rec(b"x"), rec(b"y")]) for _ in range(5)]
    after = time.time_ns() // 1_000_000
    records = await read_all(store, "s")
    stamps = [r.timestamp for r in records]
    assert stamps == sorted(stamps)
    assert before - 1000 <= stamps[0] and stamps[-1] <= after + 1000
    for ack in acks:
        assert all(r.timestamp == ack.timestamp for r in records[ack.start_seq : ack.next_seq])


async def test_bodies_and_headers_are_byte_exact(store: Store) -> None:
    every_byte = bytes(range(256))
    largest = store.limits.max_body_bytes
    records = [
        rec(every_byte, (every_byte, every_byte[::-1]), (b"", b""), (b"e", b"audio")),
        rec(b""),
        rec(b"\x00" * 7, (b"\x00", b"\xff")),
        rec((every_byte * 4096)[:largest]),  # the largest body this store takes
        rec(b"dup", (b"k", b"1"), (b"k", b"2")),
    ]
    await store.append("bin", records)
    got = await read_all(store, "bin")
    assert [(r.body, r.headers) for r in got] == [(r.body, r.headers) for r in records]
    assert got[0].header(b"e") == b"audio"
    assert got[4].header(b"k") == b"1"
    assert got[4].header(b"missing") is None
    assert all(isinstance(r.body, bytes) for r in got)


def test_a_stores_limits_are_within_the_contracts(store: Store) -> None:
    limits = store.limits
    assert isinstance(limits, Limits)
    assert 60 * 1024 <= limits.max_body_bytes <= MAX_BODY_BYTES
    assert limits.max_header_bytes == MAX_HEADER_BYTES
    assert limits.max_headers == MAX_HEADERS
    assert limits.max_body_bytes <= limits.max_record_bytes <= MAX_BODY_BYTES + MAX_HEADER_BYTES
    assert 1 <= limits.max_batch_records <= MAX_BATCH_RECORDS
    assert limits.max_record_bytes <= limits.max_batch_bytes <= MAX_BATCH_BYTES


def _largest_record(limits: Limits) -> AppendRecord:
    """A record of exactly `max_record_bytes`, with as many headers as a record may carry and
    as much in them as fits beside the largest body."""
    headers = [(b"h%d" % i, b"") for i in range(limits.max_headers - 1)]
    used = sum(len(k) for k, _ in headers)
    room = min(limits.max_header_bytes, limits.max_record_bytes - limits.max_body_bytes) - used
    headers.append((b"v", b"v" * max(0, room - 1)))
    record = AppendRecord(b"", tuple(headers))
    body = b"b" * min(limits.max_body_bytes, limits.max_record_bytes - record_size(record))
    return AppendRecord(body, tuple(headers))


async def test_the_limits_themselves_are_accepted(store: Store) -> None:
    limits = store.limits
    largest = _largest_record(limits)
    assert record_size(largest) == limits.max_record_bytes
    assert len(largest.headers) == limits.max_headers
    await store.append("big", [largest])
    largest_headers = ((b"h" * 100, b"v" * (limits.max_header_bytes - 100)),)
    await store.append("big", [AppendRecord(b"", largest_headers)])
    await store.append("many", [rec(b"%d" % i) for i in range(limits.max_batch_records)])
    per = limits.max_batch_bytes // limits.max_body_bytes
    heavy = [rec(b"x" * limits.max_body_bytes)] * per
    rest = limits.max_batch_bytes - per * limits.max_body_bytes
    await store.append("heavy", [*heavy, rec(b"x" * rest)] if rest else heavy)
    got = await read_all(store, "big")
    assert (got[0].headers, got[0].body) == (largest.headers, largest.body)
    assert got[1].headers == largest_headers
    assert len(await read_all(store, "many")) == limits.max_batch_records
    assert sum(record_size(r) for r in await read_all(store, "heavy")) == limits.max_batch_bytes


def _over(limits: Limits) -> dict[str, list[AppendRecord]]:
    largest = limits.max_record_bytes
    return {
        "empty-batch": [],
        "body-too-large": [rec(b"ok"), rec(b"x" * (limits.max_body_bytes + 1))],
        "headers-too-large": [rec(b"ok"), rec(b"", (b"h", b"v" * limits.max_header_bytes))],
        "too-many-headers": [rec(b"", *[(b"k", b"")] * (limits.max_headers + 1))],
        "record-too-large": [
            rec(b"x" * limits.max_body_bytes, (b"h", b"v" * (largest - limits.max_body_bytes)))
        ],
        "too-many-records": [rec(b"r")] * (limits.max_batch_records + 1),
        "batch-too-large": [rec(b"x" * limits.max_body_bytes)]
        * (limits.max_batch_bytes // limits.max_body_bytes + 1),
    }


@pytest.mark.parametrize("over", list(_over(Limits(100, 10, 1000))))
async def test_a_batch_over_a_limit_writes_nothing(store: Store, over: str) -> None:
    batch = _over(store.limits)[over]
    await store.append("s", [rec(b"before")])
    with pytest.raises(RecordTooLarge):
        await store.append("s", batch)
    with pytest.raises(RecordTooLarge):
        await store.append("fresh", batch)
    assert [r.body for r in await read_all(store, "s")] == [b"before"]
    assert await store.check_tail("fresh") == 0
    assert [i.name for i in await store.list()] == ["s"]


@pytest.mark.parametrize(
    "record",
    [
        pytest.param(AppendRecord(body="text"), id="str-body"),  # type: ignore[arg-type]
        pytest.param(AppendRecord(b"", (("k", b"v"),)), id="str-header-name"),  # type: ignore[arg-type]
        pytest.param(AppendRecord(b"", ((b"k", "v"),)), id="str-header-value"),  # type: ignore[arg-type]
        pytest.param(AppendRecord(b"", ((b"k",),)), id="header-not-a-pair"),  # type: ignore[arg-type]
    ],
)
async def test_a_record_of_the_wrong_type_is_refused_and_writes_nothing(
    store: Store, record: AppendRecord
) -> None:
    with pytest.raises(TypeError):
        await store.append("s", [rec(b"fine"), record])
    assert await store.check_tail("s") == 0


# -- conditional appends and claims ----------------------------------------------------------


async def test_a_claim_succeeds_once(store: Store) -> None:
    ack = await store.append("c", [rec(b"mine")], match_seq_num=0)
    assert ack.start_seq == 0
    with pytest.raises(SeqMismatch) as lost:
        await store.append("c", [rec(b"theirs")], match_seq_num=0)
    assert (lost.value.stream, lost.value.expected, lost.value.next_seq) == ("c", 0, 1)
    assert [r.body for r in await read_all(store, "c")] == [b"mine"]


async def test_a_mismatch_carries_the_actual_next_seq_and_writes_nothing(store: Store) -> None:
    await store.append("s", [rec(b"0"), rec(b"1"), rec(b"2")])
    for expected in (0, 2, 4, 1000):
        with pytest.raises(SeqMismatch) as err:
            await store.append("s", [rec(b"no"), rec(b"no")], match_seq_num=expected)
        assert err.value.next_seq == 3 and err.value.expected == expected
    ack = await store.append("s", [rec(b"3")], match_seq_num=3)
    assert (ack.start_seq, ack.next_seq) == (3, 4)
    assert [r.body for r in await read_all(store, "s")] == [b"0", b"1", b"2", b"3"]


async def test_a_conditional_append_to_a_missing_stream_needs_zero(store: Store) -> None:
    with pytest.raises(SeqMismatch) as err:
        await store.append("missing", [rec()], match_seq_num=1)
    assert err.value.next_seq == 0
    assert await store.list() == []


async def test_concurrent_claims_from_many_tasks_and_handles(
    store: Store, open_handle: OpenHandle
) -> None:
    handles = [store, await open_handle(), await open_handle()]
    streams = [f"claims/{i}" for i in range(5)]

    async def claim(handle: Store, stream: str, who: int) -> int | None:
        try:
            await handle.append(stream, [rec(b"%d" % who)], match_seq_num=0)
        except SeqMismatch as lost:
            assert lost.next_seq == 1
            return None
        return who

    attempts = [
        claim(handles[who % len(handles)], stream, who) for stream in streams for who in range(30)
    ]
    results = await asyncio.gather(*attempts)
    for i, stream in enumerate(streams):
        winners = [w for w in results[i * 30 : (i + 1) * 30] if w is not None]
        assert len(winners) == 1
        assert [r.body for r in await read_all(store, stream)] == [b"%d" % winners[0]]


async def test_grouped_appends_do_not_undo_each_other(store: Store) -> None:
    """Many appends land at once (one group commit); a failed condition spoils none other."""
    await store.append("g", [rec(b"0")])
    good = [store.append(f"g/{i}", [rec(b"%d" % i)]) for i in range(50)]
    bad = [store.append("g", [rec(b"late")], match_seq_num=0) for _ in range(50)]
    results = await asyncio.gather(*good, *bad, return_exceptions=True)
    assert all(not isinstance(r, BaseException) for r in results[:50])
    assert all(isinstance(r, SeqMismatch) for r in results[50:])
    assert len(await store.list("g/")) == 50
    assert await store.check_tail("g") == 1


async def test_a_cancelled_append_leaves_the_store_working(store: Store) -> None:
    """Cancelling appends (a client gone) must not break the store for everyone else."""
    for _ in range(5):
        tasks = [asyncio.ensure_future(store.append("x", [rec(b"%d" % i)])) for i in range(40)]
        await asyncio.sleep(0)
        for task in tasks[::2]:
            task.cancel()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
    ack = await asyncio.wait_for(store.append("after", [rec(b"ok")]), 10)
    assert ack.start_seq == 0
    records = await read_all(store, "x")
    assert [r.seq_num for r in records] == list(range(len(records)))
    # Every append that was not cancelled landed exactly once.
    assert len(records) >= 5 * 20


# -- reads -----------------------------------------------------------------------------------


async def test_reading_a_missing_stream_is_reading_an_empty_one(store: Store) -> None:
    batch = await store.read("nothing/here")
    assert (batch.records, batch.tail) == ([], 0)
    assert await store.check_tail("nothing/here") == 0
    with pytest.raises(SeqOutOfRange) as err:
        await store.read("nothing/here", 1)
    assert (err.value.seq_num, err.value.tail) == (1, 0)


async def test_reading_at_and_past_the_tail(store: Store) -> None:
    await store.append("s", [rec(b"a"), rec(b"b")])
    at_tail = await store.read("s", 2)
    assert (at_tail.records, at_tail.tail) == ([], 2)
    with pytest.raises(SeqOutOfRange) as err:
        await store.read("s", 3)
    assert (err.value.stream, err.value.seq_num, err.value.tail) == ("s", 3, 2)
    middle = await store.read("s", 1)
    assert [r.body for r in middle.records] == [b"b"] and middle.tail == 2


async def test_max_records_and_max_bytes(store: Store) -> None:
    await store.append("s", [rec(bytes([i]) * 1000) for i in range(10)])
    assert [r.seq_num for r in (await store.read("s", 2, max_records=3)).records] == [2, 3, 4]
    assert len((await store.read("s", 0, max_records=0)).records) == 1
    small = await store.read("s", 0, max_bytes=2500)
    assert 1 <= len(small.records) <= 2 and small.tail == 10
    # At least one record comes back, even over max_bytes.
    assert [r.seq_num for r in (await store.read("s", 7, max_bytes=1)).records] == [7]
    assert [r.seq_num for r in (await store.read("s", 7, max_bytes=0)).records] == [7]
    everything = await store.read("s", 0, max_records=1000)
    assert len(everything.records) == 10


async def test_a_read_without_bodies_has_everything_but_the_bodies(store: Store) -> None:
    bodies = [b"", b"x", bytes(range(256)) * 40, b"\x00" * 100_000]
    await store.append(
        "s", [rec(b, (b"e", b"audio"), (b"i", b"%d" % i)) for i, b in enumerate(bodies)]
    )
    whole = await read_all(store, "s")
    bare = await store.read("s", 0, bodies=False)
    assert bare.tail == 4
    assert [(r.seq_num, r.timestamp, r.headers) for r in bare.records] == [
        (r.seq_num, r.timestamp, r.headers) for r in whole
    ]
    assert [r.body for r in bare.records] == [b""] * 4
    assert [r.omitted for r in bare.records] == [len(b) for b in bodies]
    assert [r.body_size for r in bare.records] == [len(b) for b in bodies]
    # A read with bodies omits nothing.
    assert [(r.omitted, r.body_size) for r in whole] == [(0, len(b)) for b in bodies]
    # From the middle, one record at a time.
    one = await store.read("s", 3, max_records=1, bodies=False)
    assert [(r.seq_num, r.omitted) for r in one.records] == [(3, 100_000)]


async def test_max_bytes_of_a_read_without_bodies_counts_headers_only(store: Store) -> None:
    big = store.limits.max_body_bytes // 2
    await store.append("s", [rec(b"a" * big, (b"i", b"%d" % i)) for i in range(6)])
    bare = await store.read("s", 0, max_bytes=1000, bodies=False)
    assert [r.seq_num for r in bare.records] == list(range(6))
    assert all(r.omitted == big for r in bare.records)
    assert len((await store.read("s", 0, max_bytes=1000)).records) == 1
    # Headers still count: a tight limit gives at least one record, and no more than fit.
    tight = await store.read("s", 2, max_bytes=4, bodies=False)
    assert [r.seq_num for r in tight.records][:1] == [2] and len(tight.records) <= 2


async def test_a_read_without_bodies_keeps_the_reads_other_rules(store: Store) -> None:
    await store.append("s", [rec(b"a"), rec(b"bb"), rec(b"ccc")])
    assert (await store.read("s", 3, bodies=False)).records == []
    with pytest.raises(SeqOutOfRange):
        await store.read("s", 4, bodies=False)
    await store.trim("s", 2)
    with pytest.raises(SeqOutOfRange) as err:
        await store.read("s", 1, bodies=False)
    assert err.value.first == 2
    waiting = asyncio.ensure_future(store.read("s", 3, wait=10, bodies=False))
    await asyncio.sleep(0.05)
    await store.append("s", [rec(b"dddd", (b"e", b"eos"))])
    batch = await asyncio.wait_for(waiting, 10)
    assert [(r.seq_num, r.headers, r.body, r.omitted) for r in batch.records] == [
        (3, ((b"e", b"eos"),), b"", 4)
    ]


async def test_a_read_returns_what_is_there_without_waiting(store: Store) -> None:
    await store.append("s", [rec(b"x")])
    started = time.monotonic()
    batch = await store.read("s", 0, wait=30)
    assert [r.body for r in batch.records] == [b"x"]
    assert time.monotonic() - started < 5


async def test_a_long_poll_returns_on_time_when_nothing_lands(store: Store) -> None:
    await store.append("s", [rec(b"x")])
    for stream, seq in (("s", 1), ("missing", 0)):
        started = time.monotonic()
        batch = await store.read(stream, seq, wait=0.3)
        elapsed = time.monotonic() - started
        assert batch.records == [] and batch.tail == seq
        assert 0.3 <= elapsed < 1.3


@pytest.mark.parametrize("writer", ["same-handle", "other-handle"])
async def test_a_long_poll_returns_promptly_when_a_record_lands(
    store: Store, open_handle: OpenHandle, writer: str
) -> None:
    other = store if writer == "same-handle" else await open_handle()
    for seq in range(3):
        poll = asyncio.ensure_future(store.read("s", seq, wait=20))
        await asyncio.sleep(0.05)
        assert not poll.done()
        started = time.monotonic()
        await other.append("s", [rec(b"%d" % seq)])
        batch = await asyncio.wait_for(poll, 10)
        assert time.monotonic() - started < 1.0
        assert [r.body for r in batch.records] == [b"%d" % seq]


async def test_an_append_to_another_stream_does_not_end_a_long_poll(
    store: Store, open_handle: OpenHandle
) -> None:
    other = await open_handle()
    poll = asyncio.ensure_future(store.read("quiet", 0, wait=0.5))
    await asyncio.sleep(0.05)
    for i in range(5):
        await other.append("noisy", [rec(b"%d" % i)])
    batch = await poll
    assert batch.records == []


async def test_follow_sees_existing_then_live_records_from_another_handle(
    store: Store, open_handle: OpenHandle
) -> None:
    writer = await open_handle()
    await writer.append("f", [rec(b"0"), rec(b"1")])
    seen: list[Record] = []
    got_all = asyncio.Event()

    async def follow() -> None:
        async for record in store.follow("f", 1):
            seen.append(record)
            if len(seen) == 6:
                got_all.set()

    task = asyncio.ensure_future(follow())
    try:
        for i in range(2, 7):
            await asyncio.sleep(0.02)
            await writer.append("f", [rec(b"%d" % i)])
        await asyncio.wait_for(got_all.wait(), 10)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert [(r.seq_num, r.body) for r in seen] == [(i, b"%d" % i) for i in range(1, 7)]


async def test_many_followers_all_see_every_record(store: Store, open_handle: OpenHandle) -> None:
    readers = [store, await open_handle()]
    writer = await open_handle()

    async def follow(handle: Store) -> list[int]:
        seqs: list[int] = []
        async for record in handle.follow("f"):
            seqs.append(record.seq_num)
            if len(seqs) == 50:
                return seqs
        raise AssertionError("follow ended")

    followers = [asyncio.ensure_future(follow(readers[i % 2])) for i in range(10)]
    for i in range(50):
        await writer.append("f", [rec(b"%d" % i)])
    for seqs in await asyncio.wait_for(asyncio.gather(*followers), 20):
        assert seqs == list(range(50))


# -- list, delete ----------------------------------------------------------------------------


async def test_list_by_prefix_in_name_order(store: Store) -> None:
    names = ["pub/casts/b", "pub/casts/a", "jobs", "jobs/_cursor", "catalog/a", "pub/x"]
    for i, name in enumerate(names):
        await store.append(name, [rec()] * (i + 1))
    everything = await store.list()
    assert [s.name for s in everything] == sorted(names)
    casts = await store.list("pub/casts/")
    assert [(s.name, s.next_seq) for s in casts] == [("pub/casts/a", 2), ("pub/casts/b", 1)]
    assert all(s.touched_ms > 0 for s in casts)
    assert [s.name for s in await store.list("jobs")] == ["jobs", "jobs/_cursor"]
    assert await store.list("nope/") == []
    assert len(await store.list(limit=2)) == 2


async def test_delete_then_append_starts_again_at_zero(store: Store) -> None:
    await store.append("d", [rec(b"old")] * 3)
    await store.append("keep", [rec(b"k")])
    assert await store.delete("d") is True
    assert await store.delete("d") is False
    assert await store.check_tail("d") == 0
    assert (await store.read("d")).records == []
    assert [s.name for s in await store.list()] == ["keep"]
    ack = await store.append("d", [rec(b"new")], match_seq_num=0)
    assert ack.start_seq == 0
    assert [r.body for r in await read_all(store, "d")] == [b"new"]
    assert await store.check_tail("keep") == 1


async def test_a_delete_ends_a_long_poll_past_the_new_tail(
    store: Store, open_handle: OpenHandle
) -> None:
    """A follower of a deleted stream learns it (SeqOutOfRange) instead of waiting forever."""
    other = await open_handle()
    await store.append("d", [rec(b"x")])
    poll = asyncio.ensure_future(other.read("d", 1, wait=20))
    await asyncio.sleep(0.05)
    await store.delete("d")
    with pytest.raises(SeqOutOfRange) as err:
        await asyncio.wait_for(poll, 5)
    assert (err.value.seq_num, err.value.tail) == (1, 0)


# -- names -----------------------------------------------------------------------------------

BAD_NAMES = [
    pytest.param("", id="empty"),
    pytest.param("a" * (MAX_NAME_BYTES + 1), id="too-long"),
    pytest.param("a/" + "é" * (MAX_NAME_BYTES // 2), id="too-long-in-bytes"),
    pytest.param("..", id="dotdot"),
    pytest.param("a/../b", id="dotdot-inside"),
    pytest.param("a/./b", id="dot-inside"),
    pytest.param("a//b", id="empty-segment"),
    pytest.param("/a", id="leading-slash"),
    pytest.param("a/", id="trailing-slash"),
    pytest.param("a b", id="space"),
    pytest.param("a\nb", id="newline"),
    pytest.param("a\x00b", id="nul"),
    pytest.param("caf\u00e9", id="non-ascii"),
    pytest.param("a*", id="glob"),
]


@pytest.mark.parametrize("name", BAD_NAMES)
async def test_bad_names_are_refused_everywhere(store: Store, name: str) -> None:
    with pytest.raises(InvalidStreamName):
        await store.append(name, [rec()])
    with pytest.raises(InvalidStreamName):
        await store.append(name, [rec()], match_seq_num=0)
    with pytest.raises(InvalidStreamName):
        await store.read(name)
    with pytest.raises(InvalidStreamName):
        await store.check_tail(name)
    with pytest.raises(InvalidStreamName):
        await store.delete(name)
    with pytest.raises(InvalidStreamName):
        await store.trim(name, 0)
    with pytest.raises(InvalidStreamName):
        await anext(store.follow(name))
    assert await store.list() == []


async def test_the_longest_and_oddest_good_names(store: Store) -> None:
    names = ["a" * MAX_NAME_BYTES, "pub/casts/Ab-_9.x", "...", "a/.b/c.", "_", "A/B/C/D"]
    for name in names:
        await store.append(name, [rec(name.encode())])
    assert sorted(s.name for s in await store.list()) == sorted(names)
    for name in names:
        assert (await store.read(name)).records[0].body == name.encode()


# -- closing ---------------------------------------------------------------------------------


async def test_a_closed_store_raises_store_closed(open_handle: OpenHandle) -> None:
    store = await open_handle()
    await store.append("s", [rec(b"x")])
    await store.close()
    await store.close()  # closing twice is fine
    for call in (
        store.append("s", [rec()]),
        store.append("s", [rec()], match_seq_num=1),
        store.read("s"),
        store.read("s", 1, wait=1),
        store.check_tail("s"),
        store.list(),
        store.delete("s"),
        store.trim("s", 0),
        store.sweep(0, ["s"]),
        anext(store.follow("s")),
    ):
        with pytest.raises(StoreClosed):
            await call


async def test_closing_ends_a_waiting_read_and_keeps_the_data(
    open_handle: OpenHandle,
) -> None:
    store = await open_handle()
    await store.append("s", [rec(b"x")])
    poll = asyncio.ensure_future(store.read("s", 1, wait=30))
    await asyncio.sleep(0.05)
    await asyncio.wait_for(store.close(), 10)
    with pytest.raises(StoreClosed):
        await asyncio.wait_for(poll, 5)
    reopened = await open_handle()
    assert [r.body for r in await read_all(reopened, "s")] == [b"x"]


async def test_async_with_closes(store_url: str) -> None:
    from speechd.durable import open_store

    async with await open_store(store_url) as store:
        await store.append("s", [rec(b"x")])
    with pytest.raises(StoreClosed):
        await store.read("s")


# -- Limits.batches (the worker splits its appends with it) ------------------------------------


def test_batches_split_records_into_appends_that_fit_in_order() -> None:
    limits = Limits(max_record_bytes=100, max_batch_records=3, max_batch_bytes=150)
    records = [rec(b"%02d" % i) for i in range(7)]  # 2 bytes each: the record count decides
    assert [[r.body for r in b] for b in limits.batches(records)] == [
        [b"00", b"01", b"02"],
        [b"03", b"04", b"05"],
        [b"06"],
    ]
    heavy = [rec(b"x" * 60, (b"h", b"v" * 9)) for _ in range(4)]  # 70 bytes each
    assert [len(b) for b in limits.batches(heavy)] == [2, 2]
    assert limits.batches([]) == []
    for batch in limits.batches(heavy + records):
        assert len(batch) <= 3 and sum(record_size(r) for r in batch) <= 150


def test_batches_refuse_a_record_no_append_could_hold() -> None:
    limits = Limits(max_record_bytes=100, max_batch_records=3, max_batch_bytes=150)
    with pytest.raises(RecordTooLarge):
        limits.batches([rec(b"ok"), rec(b"x" * 101)])
    with pytest.raises(TypeError):
        limits.batches([rec(b"ok"), AppendRecord(body="text")])  # type: ignore[arg-type]


def test_record_size_is_the_body_and_header_bytes() -> None:
    assert record_size(rec(b"abc", (b"k", b"vv"), (b"", b""))) == 6
