"""CastService on a real store: validation before any write, voices from ready workers,
the queue limit, and one cast per identical request."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Sequence

import pytest

from harness.engines import VOICES
from speechd import casts
from speechd.casts import schema
from speechd.durable import AppendRecord, Store
from speechd.engine import EngineConfig
from speechd.errors import InvalidRequest, QueueFull, Unavailable, UnknownVoice
from speechd.service import CastRequest, CastService, voice_label
from speechd.service._requests import derive_title


async def announce(store: Store, *, worker: str = "w1", voices: Sequence[str] = VOICES) -> None:
    notice = schema.WorkerNotice(
        kind="ready", worker=worker, time_ms=int(time.time() * 1000), voices=list(voices)
    )
    await store.append(schema.worker_stream(worker), [AppendRecord(schema.encode(notice))])


async def service_on(store: Store, *, max_queue: int = 4, skew_s: float = 0) -> CastService:
    secret = await casts.deployment_secret(store)
    return CastService(
        store,
        secret,
        max_queue=max_queue,
        default_voice="af_heart",
        voice_map=EngineConfig().voice_map,
        clock=lambda: time.time() + skew_s,
    )


async def cast_streams(store: Store) -> list[str]:
    return [info.name for info in await store.list(schema.CAST_PREFIX)]


async def test_no_ready_worker_means_unavailable_and_nothing_written(store: Store) -> None:
    await announce(store)
    service = await service_on(store, skew_s=3600)  # an hour later, with no heartbeat since
    assert await service.workers() == []
    with pytest.raises(Unavailable):
        await service.submit(CastRequest(text="hello"), max_chars=100)
    with pytest.raises(Unavailable):
        await service.voices()
    assert await cast_streams(store) == []


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        (" \n\t ", "empty"),
        ("x" * 101, "longer than 100"),
        ("bell\x07", "control character U+0007"),
        ("nul\x00", "control character U+0000"),
        ("c1\x85", "control character U+0085"),
        ("half \ud83d pair", "unpaired surrogate U+D83D"),
    ],
)
async def test_bad_text_is_refused_before_any_write(store: Store, text: str, fragment: str) -> None:
    await announce(store)
    service = await service_on(store)
    with pytest.raises(InvalidRequest, match=re.escape(fragment)) as caught:
        await service.submit(CastRequest(text=text), max_chars=100, text_param="input")
    assert caught.value.param == "input"
    assert await cast_streams(store) == []


async def test_bad_voice_format_and_speed_are_refused_before_any_write(store: Store) -> None:
    await announce(store)
    service = await service_on(store)
    with pytest.raises(UnknownVoice):
        await service.submit(CastRequest(text="hi", voice="zz_nobody"), max_chars=100)
    with pytest.raises(InvalidRequest) as caught:
        await service.submit(CastRequest(text="hi", format="ogg"), max_chars=100)
    assert caught.value.param == "response_format"
    with pytest.raises(InvalidRequest) as caught:
        await service.submit(CastRequest(text="hi", speed=4.5), max_chars=100)
    assert caught.value.param == "speed"
    assert await cast_streams(store) == []


async def test_identical_requests_share_one_cast_and_one_job(store: Store) -> None:
    await announce(store)
    service = await service_on(store)
    request = CastRequest(text="  Hello there.  ", voice="af_bella", speed=1.0)
    results = await asyncio.gather(*(service.submit(request, max_chars=100) for _ in range(16)))
    assert len({r.id for r in results}) == 1
    assert sum(r.created for r in results) == 1
    assert results[0].recipe.text == "  Hello there."  # timed words count from its start
    jobs = (await store.read(schema.JOBS, 0)).records
    assert [schema.decode(r.body, schema.Job).id for r in jobs] == [results[0].id]
    # Trailing space does not make another cast; another speed does, and so does leading
    # space (every word's offset into the text as sent moves with it).
    again = await service.submit(
        CastRequest(text="  Hello there.", voice="af_bella"), max_chars=100
    )
    faster = await service.submit(
        CastRequest(text="  Hello there.", voice="af_bella", speed=1.5), max_chars=100
    )
    moved = await service.submit(CastRequest(text="Hello there.", voice="af_bella"), max_chars=100)
    assert again.id == results[0].id and faster.id != results[0].id
    assert moved.id != results[0].id


async def test_queue_over_its_depth_is_refused_but_existing_casts_still_answer(
    store: Store,
) -> None:
    await announce(store)
    service = await service_on(store, max_queue=2)
    first = await service.submit(CastRequest(text="one"), max_chars=100)
    await service.submit(CastRequest(text="two"), max_chars=100)
    assert await service.queue_depth() == 2
    with pytest.raises(QueueFull) as caught:
        await service.submit(CastRequest(text="three"), max_chars=100)
    assert caught.value.retry_after >= 1
    assert (await service.submit(CastRequest(text="one"), max_chars=100)).id == first.id
    # A worker that commits its cursor past the first job frees a place.
    await store.append(schema.JOBS_CURSOR, [AppendRecord(schema.encode(schema.Cursor(1)))])
    assert await service.queue_depth() == 1
    assert await service.pending_casts(limit=10) == [
        (await service.submit(CastRequest(text="two"), max_chars=100)).id
    ]
    await service.submit(CastRequest(text="three"), max_chars=100)


async def test_voice_list_is_the_union_of_ready_workers(store: Store) -> None:
    await announce(store, worker="w1")
    await announce(store, worker="w2", voices=["ff_siwis"])
    # A later heartbeat keeps w2 fresh; the voices are its ready notice's.
    beat = schema.WorkerNotice(kind="heartbeat", worker="w2", time_ms=int(time.time() * 1000))
    await store.append(schema.worker_stream("w2"), [AppendRecord(schema.encode(beat))])
    service = await service_on(store)
    assert sorted(await service.voices()) == sorted([*VOICES, "ff_siwis"])


def test_titles_and_voice_labels() -> None:
    assert derive_title("  Short one.\nSecond line") == "Short one."
    long = "word " * 40
    title = derive_title(long)
    assert len(title) <= 81 and title.endswith("…") and " " not in title[-2:]
    assert voice_label("af_heart") == "Heart (American English, female)"
    assert voice_label("bm_george") == "George (British English, male)"
    assert voice_label("custom") == "custom"
