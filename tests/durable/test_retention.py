"""Age-based retention: `Store.sweep` and the background `sweep_forever`, on every backend."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from speechd.durable import Retention, Store, sweep_forever
from speechd.durable._contract import SWEEP_PAGE

from ._support import OpenHandle, rec


async def test_sweep_removes_only_streams_untouched_for_the_age_under_the_prefixes(
    store: Store,
) -> None:
    for name in ("tmp/old", "tmp/old/child", "keep/old", "tmpx"):
        await store.append(name, [rec(b"x")])
    await asyncio.sleep(0.6)
    await store.append("tmp/new", [rec(b"y")])
    await store.append("keep/old", [rec(b"touched again")])
    assert await store.sweep(0.5, ["tmp/"]) == 2
    assert [s.name for s in await store.list()] == ["keep/old", "tmp/new", "tmpx"]
    assert await store.check_tail("tmp/old") == 0
    # A swept stream starts again from zero.
    assert (await store.append("tmp/old", [rec()], match_seq_num=0)).start_seq == 0


async def test_no_prefixes_means_keep_everything(store: Store) -> None:
    await store.append("a", [rec()])
    await asyncio.sleep(0.01)
    assert await store.sweep(0, []) == 0
    assert await store.sweep(3600, [""]) == 0
    assert [s.name for s in await store.list()] == ["a"]
    await asyncio.sleep(0.01)
    assert await store.sweep(0, [""]) == 1
    assert await store.list() == []


async def test_a_sweep_keeps_what_spare_names_and_asks_only_about_expired_streams(
    store: Store,
) -> None:
    for name in ("tmp/a", "tmp/b", "tmp/c", "other/a"):
        await store.append(name, [rec(b"x")])
    await asyncio.sleep(0.6)
    await store.append("tmp/fresh", [rec(b"y")])
    asked: list[list[str]] = []

    async def spare(names: list[str]) -> set[str]:
        asked.append(sorted(names))
        return {"tmp/b", "tmp/not-listed"}

    assert await store.sweep(0.5, ["tmp/", "other/"], spare=spare) == 3
    assert sorted(n for page in asked for n in page) == ["other/a", "tmp/a", "tmp/b", "tmp/c"]
    assert all(len(page) <= SWEEP_PAGE for page in asked)
    assert [s.name for s in await store.list()] == ["tmp/b", "tmp/fresh"]
    # Spared once is not spared forever: the next sweep asks again.
    assert await store.sweep(0.5, ["tmp/"], spare=lambda names: _none()) == 1
    assert [s.name for s in await store.list()] == ["tmp/fresh"]


async def _none() -> set[str]:
    return set()


async def test_a_stream_changed_while_its_page_is_judged_is_not_removed(store: Store) -> None:
    """The sweep removes a stream only as it was when its page was listed: one appended to,
    or removed and made again (a new life, the same length), while `spare` judged the page
    survives; the others of the page go."""
    for name in ("tmp/appended", "tmp/remade", "tmp/untouched"):
        await store.append(name, [rec(b"x")])
    await asyncio.sleep(0.6)

    async def spare(names: list[str]) -> set[str]:
        if "tmp/appended" in names:
            await store.append("tmp/appended", [rec(b"again")])
            await store.delete("tmp/remade")
            await store.append("tmp/remade", [rec(b"a new life")], match_seq_num=0)
        return set()

    assert await store.sweep(0.5, ["tmp/"], spare=spare) == 1
    assert [s.name for s in await store.list()] == ["tmp/appended", "tmp/remade"]
    remade = await store.read("tmp/remade", 0)
    assert [r.body for r in remade.records] == [b"a new life"]


async def test_sweep_forever_passes_spare_on(store: Store) -> None:
    await store.append("tmp/kept", [rec()])
    await store.append("tmp/gone", [rec()])

    async def spare(names: list[str]) -> set[str]:
        return {"tmp/kept"}

    sweeper = asyncio.ensure_future(sweep_forever(store, Retention(0.2, ("tmp/",)), spare=spare))
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if not await store.check_tail("tmp/gone"):
                break
            await asyncio.sleep(0.05)
    finally:
        sweeper.cancel()
        await asyncio.gather(sweeper, return_exceptions=True)
    assert [s.name for s in await store.list()] == ["tmp/kept"]


def test_the_sweep_interval_follows_the_age() -> None:
    assert Retention(0.1, ("x/",)).interval_s == 0.05
    assert Retention(30, ("x/",)).interval_s == 3
    assert Retention(86400, ("x/",)).interval_s == 60


async def test_sweep_forever_removes_idle_streams_and_spares_live_ones(
    store: Store, open_handle: OpenHandle
) -> None:
    """A stream appended to all through the sweeping survives it, with every record."""
    other = await open_handle()
    await store.append("tmp/idle", [rec(b"once")])
    await other.append("pub/keep", [rec(b"not under a prefix")])
    sweeper = asyncio.ensure_future(sweep_forever(store, Retention(1.0, ("tmp/",))))
    appended = 0
    try:
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            await other.append("tmp/live", [rec(b"%d" % appended)])
            appended += 1
            await asyncio.sleep(0.05)
        names = [s.name for s in await store.list()]
    finally:
        sweeper.cancel()
        await asyncio.gather(sweeper, return_exceptions=True)
    assert names == ["pub/keep", "tmp/live"]
    batch = await store.read("tmp/live")
    assert [r.body for r in batch.records] == [b"%d" % i for i in range(appended)]


async def test_sweep_forever_ends_when_the_store_closes(
    open_handle: OpenHandle, caplog: pytest.LogCaptureFixture
) -> None:
    store = await open_handle()
    sweeper = asyncio.ensure_future(sweep_forever(store, Retention(0.1, ("tmp/",))))
    await asyncio.sleep(0.1)
    with caplog.at_level(logging.ERROR, logger="speechd.durable"):
        await store.close()
        await asyncio.wait_for(sweeper, 5)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
