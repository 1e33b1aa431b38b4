"""A Hypothesis state machine: the backend and an in-memory model of the contract must agree.

Each example opens two handles on the store (as two processes would) from a private event loop
and works under its own stream prefix, so examples never see each other's streams. The model
of a stream is its records by seq and its first seq (trim): records below the first are gone.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Coroutine
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from speechd.durable import (
    AppendAck,
    AppendRecord,
    SeqMismatch,
    SeqOutOfRange,
    Store,
    open_store,
)

T = TypeVar("T")

NAMES = st.sampled_from(["a", "b", "a/b", "c/d.e"])
HANDLES = st.sampled_from([0, 1])
HEADERS = st.lists(st.tuples(st.binary(max_size=6), st.binary(max_size=12)), max_size=3).map(tuple)
RECORDS = st.lists(
    st.builds(AppendRecord, body=st.binary(max_size=200), headers=HEADERS), min_size=1, max_size=4
)

# What the model keeps of a record: (timestamp, headers, body).
Stored = tuple[int, tuple[tuple[bytes, bytes], ...], bytes]


class StoreMachine(RuleBasedStateMachine):
    def __init__(self, url: str) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.handles: list[Store] = []
        self.handles.append(self.run(open_store(url)))
        self.handles.append(self.run(open_store(url)))
        self.prefix = f"model/{uuid.uuid4().hex[:12]}"
        self.streams: dict[str, list[Stored]] = {}
        self.firsts: dict[str, int] = {}  # trim points; records below are never read

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(asyncio.wait_for(coro, 30))

    def name(self, short: str) -> str:
        return f"{self.prefix}/{short}"

    def teardown(self) -> None:
        try:
            for short in ("a", "b", "a/b", "c/d.e"):
                self.read_everything(0, short)
        finally:
            for handle in self.handles:
                self.run(handle.close())
            self.loop.close()

    # -- writes --------------------------------------------------------------------------

    def applied(self, short: str, records: list[AppendRecord], ack: AppendAck) -> None:
        stored = self.streams.setdefault(short, [])
        assert (ack.start_seq, ack.next_seq) == (len(stored), len(stored) + len(records))
        if stored:
            assert ack.timestamp >= stored[-1][0]
        stored += [(ack.timestamp, tuple(r.headers), r.body) for r in records]

    @rule(handle=HANDLES, short=NAMES, records=RECORDS)
    def append(self, handle: int, short: str, records: list[AppendRecord]) -> None:
        ack = self.run(self.handles[handle].append(self.name(short), records))
        self.applied(short, records, ack)

    @rule(handle=HANDLES, short=NAMES, records=RECORDS, delta=st.integers(-2, 2))
    def append_if(self, handle: int, short: str, records: list[AppendRecord], delta: int) -> None:
        tail = len(self.streams.get(short, []))
        expected = max(0, tail + delta)
        try:
            ack = self.run(
                self.handles[handle].append(self.name(short), records, match_seq_num=expected)
            )
        except SeqMismatch as err:
            assert expected != tail
            assert (err.expected, err.next_seq) == (expected, tail)
        else:
            assert expected == tail
            self.applied(short, records, ack)

    @rule(handle=HANDLES, short=NAMES, records=RECORDS)
    def claim(self, handle: int, short: str, records: list[AppendRecord]) -> None:
        self.append_if(handle, short, records, -len(self.streams.get(short, [])))

    @rule(handle=HANDLES, short=NAMES)
    def delete(self, handle: int, short: str) -> None:
        existed = self.run(self.handles[handle].delete(self.name(short)))
        assert existed == bool(self.streams.pop(short, None))
        self.firsts.pop(short, None)

    @rule(handle=HANDLES, short=NAMES, at=st.integers(-1, 12))
    def trim(self, handle: int, short: str, at: int) -> None:
        tail = len(self.streams.get(short, []))
        first = self.firsts.get(short, 0)
        try:
            got = self.run(self.handles[handle].trim(self.name(short), at))
        except SeqOutOfRange as err:
            assert at < 0 or at > tail
            assert (err.seq_num, err.first, err.tail) == (at, first, tail)
            return
        assert 0 <= at <= tail
        assert got == max(first, at)
        if short in self.streams:
            self.firsts[short] = got

    # -- reads ---------------------------------------------------------------------------

    @rule(
        handle=HANDLES,
        short=NAMES,
        seq=st.integers(0, 12),
        max_records=st.integers(1, 5),
        max_bytes=st.sampled_from([0, 100, 400, 10_000]),
        bodies=st.booleans(),
    )
    def read(
        self, handle: int, short: str, seq: int, max_records: int, max_bytes: int, bodies: bool
    ) -> None:
        stored = self.streams.get(short, [])
        first = self.firsts.get(short, 0)
        try:
            batch = self.run(
                self.handles[handle].read(
                    self.name(short),
                    seq,
                    max_records=max_records,
                    max_bytes=max_bytes,
                    bodies=bodies,
                )
            )
        except SeqOutOfRange as err:
            assert seq > len(stored) or seq < first
            assert (err.seq_num, err.tail, err.first) == (seq, len(stored), first)
            return
        assert first <= seq <= len(stored)
        assert batch.tail == len(stored)
        got = [(r.seq_num, r.timestamp, r.headers, r.body) for r in batch.records]
        want = [(seq + i, *s) for i, s in enumerate(stored[seq:])]
        # Without bodies: each body left out, its length told.
        assert [r.body_size for r in batch.records] == [len(w[3]) for w in want[: len(got)]]
        if not bodies:
            assert all(r.body == b"" for r in batch.records)
            want = [(n, ts, h, b"") for n, ts, h, _ in want]
        assert got == want[: len(got)]
        if want:
            assert 1 <= len(got) <= max_records
        if len(got) > 1:
            assert sum(len(b) + sum(len(k) + len(v) for k, v in h) for _, _, h, b in got) <= (
                max_bytes
            )

    @rule(handle=HANDLES, short=NAMES)
    def read_everything(self, handle: int, short: str) -> None:
        first = self.firsts.get(short, 0)
        got: list[tuple[int, int, tuple[tuple[bytes, bytes], ...], bytes]] = []
        while True:
            batch = self.run(self.handles[handle].read(self.name(short), first + len(got)))
            if not batch.records:
                break
            got += [(r.seq_num, r.timestamp, r.headers, r.body) for r in batch.records]
        stored = self.streams.get(short, [])
        want = [(i, *stored[i]) for i in range(first, len(stored))]
        assert got == want

    @rule(handle=HANDLES, short=NAMES)
    def poll_at_the_tail(self, handle: int, short: str) -> None:
        tail = len(self.streams.get(short, []))
        batch = self.run(self.handles[handle].read(self.name(short), tail, wait=0.01))
        assert (batch.records, batch.tail) == ([], tail)

    @rule(handle=HANDLES, short=NAMES)
    def check_tail(self, handle: int, short: str) -> None:
        tail = self.run(self.handles[handle].check_tail(self.name(short)))
        assert tail == len(self.streams.get(short, []))

    @invariant()
    def the_listing_matches(self) -> None:
        listed = self.run(self.handles[0].list(self.prefix + "/"))
        want = sorted(
            (self.name(s), len(r), self.firsts.get(s, 0)) for s, r in self.streams.items()
        )
        assert [(s.name, s.next_seq, s.first_seq) for s in listed] == want


def test_the_store_agrees_with_the_model(store_url: str) -> None:
    run_state_machine_as_test(
        lambda: StoreMachine(store_url),
        settings=settings(
            max_examples=20,
            stateful_step_count=25,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
