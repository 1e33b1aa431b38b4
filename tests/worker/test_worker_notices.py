"""What a worker process says before it is ready (loading, unavailable, and why), the
languages it cannot speak, and the voices it leaves in the store for when no worker is ready."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness import engines
from speechd.casts import WorkerHealth, known_voices, worker_health
from speechd.casts._streams import KNOWN_VOICES
from speechd.casts.schema import WorkerNotice, decode, encode, worker_stream
from speechd.durable import AppendRecord, Store, open_store
from speechd.engine import EngineConfig
from speechd.errors import ModelUnavailable, Unavailable
from speechd.worker import Parts, WorkerConfig, run_worker
from speechd.worker._process import EXIT_MODEL_UNAVAILABLE, EXIT_OK

from ._helpers import records

WORKER = "w-notices"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def config(store_dir: Path) -> WorkerConfig:
    return WorkerConfig(
        store=str(store_dir), engine=EngineConfig(), worker_id=WORKER, heartbeat_s=0.2
    )


def no_model(config: object) -> object:
    raise ModelUnavailable("no weights in /nowhere; set --model-dir")


def fixed_languages(missing: Mapping[str, str], voices: Sequence[str]) -> Mapping[str, str]:
    return dict(missing)


def failing_parts() -> Parts:
    return Parts(load_engine=no_model, chunk_policy=engines.FakeChunkPolicy)


def notices_of(store_dir: Path) -> list[WorkerNotice]:
    async def read() -> list[WorkerNotice]:
        async with await open_store(str(store_dir)) as store:
            return [
                decode(r.body, WorkerNotice) for r in await records(store, worker_stream(WORKER))
            ]

    return asyncio.run(read())


def on_store(store_dir: Path, work: Callable[[Store], object]) -> object:
    async def run() -> object:
        async with await open_store(str(store_dir)) as store:
            return await work(store)  # type: ignore[misc]

    return asyncio.run(run())


def test_a_model_that_cannot_load_says_why(store_dir: Path) -> None:
    assert run_worker(config(store_dir), parts=failing_parts()) == EXIT_MODEL_UNAVAILABLE
    said = notices_of(store_dir)
    assert [n.kind for n in said] == ["loading", "unavailable"]
    assert said[0].error == "" and said[1].error == "no weights in /nowhere; set --model-dir"
    health = on_store(store_dir, lambda store: worker_health(store, now_ms=now_ms()))
    assert isinstance(health, WorkerHealth) and health.ready == []
    problem = health.unavailable()
    assert isinstance(problem, ModelUnavailable)
    assert problem.message == "The model is unavailable: no weights in /nowhere; set --model-dir."


def test_the_next_try_carries_the_last_failure(store_dir: Path) -> None:
    for _ in range(2):
        assert run_worker(config(store_dir), parts=failing_parts()) == EXIT_MODEL_UNAVAILABLE
    said = notices_of(store_dir)
    assert [(n.kind, bool(n.error)) for n in said] == [
        ("loading", False),
        ("unavailable", True),
        ("loading", True),  # a caller asking now hears why the last try failed
        ("unavailable", True),
    ]


def test_a_death_while_loading_is_told_by_the_next_process(store_dir: Path) -> None:
    # The previous process said `loading` (naming the chunk it died on in its life before)
    # and was killed before it could say more.
    loading = WorkerNotice(kind="loading", worker=WORKER, time_ms=now_ms(), cast="c1", chunk=3)

    async def died(store: Store) -> None:
        await store.append(worker_stream(WORKER), [AppendRecord(encode(loading))])

    on_store(store_dir, died)
    code = run_worker(config(store_dir), parts=failing_parts(), last_exit="killed by SIGKILL")
    assert code == EXIT_MODEL_UNAVAILABLE
    said = notices_of(store_dir)
    assert [n.kind for n in said] == ["loading", "loading", "unavailable"]
    assert said[1].error == (
        "the worker process before this one ended while loading the model (killed by SIGKILL)"
    )
    # The last words of the life that died rendering a chunk stay last while this one loads,
    # and after it failed too.
    assert [(n.cast, n.chunk) for n in said] == [("c1", 3)] * 3


@contextmanager
def worker_thread(store_dir: Path, parts: Parts) -> Iterator[list[int]]:
    """`run_worker` on a thread until the block ends; yields the list its exit code lands in."""
    stop = threading.Event()
    codes: list[int] = []
    thread = threading.Thread(
        target=lambda: codes.append(run_worker(config(store_dir), stop=stop, parts=parts))
    )
    thread.start()
    try:
        yield codes
    finally:
        stop.set()
        thread.join(30)


async def wait_ready(store: Store) -> WorkerNotice:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ready = (await worker_health(store, now_ms=now_ms())).ready
        if ready:
            return ready[0]
        await asyncio.sleep(0.05)
    raise AssertionError("the worker never got ready")


async def test_a_worker_announces_what_it_cannot_speak_and_keeps_its_voices(
    store: Store, store_dir: Path
) -> None:
    missing = {"j": "Voices for Japanese need a G2P that is not installed here."}
    parts = Parts(
        load_engine=engines.load_engine,
        chunk_policy=engines.FakeChunkPolicy,
        encoders=engines.FakeEncoder,
        languages=functools.partial(fixed_languages, missing),
    )
    with worker_thread(store_dir, parts) as codes:
        ready = await wait_ready(store)
        assert ready.unspeakable == missing and ready.voices == list(engines.VOICES)
    assert codes == [EXIT_OK]
    kept = await known_voices(store)
    assert kept is not None and (kept.voices, kept.unspeakable) == (ready.voices, missing)
    # A worker with the same voices again adds nothing to `config/voices`.
    with worker_thread(store_dir, parts):
        await wait_ready(store)
    assert await store.check_tail(KNOWN_VOICES) == 1
    health = await worker_health(store, now_ms=now_ms())
    problem = health.unavailable()
    assert isinstance(problem, Unavailable) and "the last one stopped" in problem.message


@pytest.mark.parametrize(
    ("notice", "fresh", "expected"),
    [
        (None, False, "No worker is ready: none has started"),
        ("loading", True, "No worker is ready yet: the model is loading."),
        ("loading-after-failure", True, "The model is unavailable: bad folder (a worker is trying"),
        ("stopped", False, "No worker is ready: the last one stopped 7 s ago."),
        ("heartbeat", False, "No worker is ready: the last one went silent 7 s ago."),
    ],
)
def test_why_no_worker_is_ready(notice: str | None, fresh: bool, expected: str) -> None:
    last = None
    if notice is not None:
        kind, _, after = notice.partition("-")
        last = WorkerNotice(kind=kind, worker="w", time_ms=0, error="bad folder." if after else "")
    problem = WorkerHealth([], last, fresh, 7.0).unavailable()
    assert problem is not None and problem.message.startswith(expected)
    assert type(problem) is (ModelUnavailable if "unavailable" in expected else Unavailable)
    ready = WorkerNotice(kind="ready", worker="w", time_ms=0)
    assert WorkerHealth([ready], last, fresh).unavailable() is None
