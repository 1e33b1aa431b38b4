"""The service's reader (`CastService.reader`), through the service: a cast's records from a seq
(public headers only, a long poll at the tail), its audio, words and whole file; a cast that
does not exist, or an id that cannot be one, reads as `CastNotFound` without a stream being
named after it; a read past a cast's end is `InvalidRequest`; and a store that fails is
`StoreUnavailable`, with one log line naming no cast."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest

from speechd import casts
from speechd.casts._records import meta_record
from speechd.casts.schema import (
    AudioChunk,
    Eos,
    Meta,
    Start,
    Word,
    audio_record,
    cast_stream,
    eos_record,
    start_record,
)
from speechd.durable import AppendAck, AppendRecord, DurableError, ReadBatch, Store
from speechd.engine import EngineConfig
from speechd.errors import CastNotFound, InvalidRequest, StoreUnavailable
from speechd.service import CastService
from tests.support.forwarding import ForwardingStore

CID = "AbCdEfGhIjKlMnOpQrStUv"
META = Meta("kokoro", "af_heart", 1.0, "pcm", 24_000, "A title", 0, 11)
BODIES = [b"\x01\x00" * 300, b"\x02\x00" * 500, b"\x03\x00" * 200]


def chunk(index: int) -> AudioChunk:
    return AudioChunk(
        attempt=1,
        index=index,
        planned=len(BODIES),
        offset_ms=index * 100,
        duration_ms=100,
        text=f"part {index}",
        body=BODIES[index],
        words=(Word(10, 60, f"w{index}"),),
        unit="word",
        plan=f"plan-{index}",
        start_seq=1,
        resume=b"checkpoint",
    )


async def make_cast(store: Store, *, done: bool = True, cast_id: str = CID) -> None:
    """A cast as a worker writes it: meta, start, its audio records, then (`done`) eos."""
    records = [meta_record(META), start_record(Start(1, "w1", 0))]
    records += [audio_record(chunk(i)) for i in range(len(BODIES))]
    if done:
        records.append(eos_record(1, Eos(len(BODIES), 300, 30), start_seq=1))
    await store.append(cast_stream(cast_id), records)


async def service_on(store: Store) -> CastService:
    return CastService(
        store,
        await casts.deployment_secret(store),
        max_queue=4,
        default_voice="af_heart",
        voice_map=EngineConfig().voice_map,
    )


async def test_records_carry_only_public_headers_and_say_where_the_cast_ends(
    store: Store,
) -> None:
    await make_cast(store)
    reader = (await service_on(store)).reader
    page = await reader.records(CID, 0)
    assert page.tail == 6
    assert [r.event for r in page.records] == ["meta", "start", "audio", "audio", "audio", "eos"]
    assert [r.terminal for r in page.records] == [False] * 5 + [True]
    assert [r.body for r in page.records[2:5]] == BODIES
    for record in page.records:
        names = {name for name, _ in record.headers}
        assert not names & {b"p", b"k"}, names  # the plan and the checkpoint stay private
    assert dict(page.records[2].headers)[b"t"] == b"part 0"
    one = await reader.records(CID, 3, max_records=1)
    assert [r.seq_num for r in one.records] == [3] and one.tail == 6
    assert await reader.tail(CID) == 6
    assert await reader.meta(CID) == META


async def test_a_read_past_the_end_is_an_invalid_request_naming_the_seq(store: Store) -> None:
    await make_cast(store)
    reader = (await service_on(store)).reader
    with pytest.raises(InvalidRequest) as past:
        await reader.records(CID, 9)
    assert past.value.param == "seq_num"
    assert past.value.message == "seq_num 9 is past the end of the cast (6 records)."
    assert (await reader.records(CID, 6)).records == []  # at the tail: nothing yet


async def test_a_long_poll_at_the_tail_returns_with_the_record_that_lands(store: Store) -> None:
    await make_cast(store, done=False)
    reader = (await service_on(store)).reader
    waiting = asyncio.ensure_future(reader.records(CID, 5, wait=30))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    await store.append(cast_stream(CID), [eos_record(1, Eos(3, 300, 30), start_seq=1)])
    page = await asyncio.wait_for(waiting, 10)
    assert [r.event for r in page.records] == ["eos"] and page.tail == 6


async def test_a_finished_casts_audio_words_and_file(store: Store) -> None:
    await make_cast(store)
    service = await service_on(store)
    reader = service.reader
    assert b"".join([piece async for piece in reader.audio(CID)]) == b"".join(BODIES)
    chunks = [c async for c in reader.chunks(CID)]
    assert [c.words for c in chunks] == [(Word(10, 60, f"w{i}"),) for i in range(3)]
    captions = await reader.captions(CID)
    assert [(w.text, w.start_ms) for w in captions.words] == [("w0", 10), ("w1", 110), ("w2", 210)]
    await reader.ended(CID)
    file = await reader.finished_file(CID)
    whole = b"".join(BODIES)
    assert file.size == len(whole) and file.format == "pcm"
    assert b"".join([p async for p in reader.file_bytes(CID, file, 0, file.size)]) == whole
    assert b"".join([p async for p in reader.file_bytes(CID, file, 550, 1700)]) == whole[550:1700]
    assert (await service.status(CID)).state == casts.CastState.DONE


async def test_a_cast_that_does_not_exist(store: Store) -> None:
    service = await service_on(store)
    reader = service.reader
    assert await reader.meta(CID) is None
    page = await reader.records(CID, 0)
    assert (page.records, page.tail) == ([], 0)
    for read in (
        reader.tail(CID),
        reader.captions(CID),
        reader.finished_file(CID),
        service.status(CID),
    ):
        with pytest.raises(CastNotFound):
            await read


class NamedStreams(ForwardingStore):
    """A store that notes every stream its reads name."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.named: list[str] = []

    async def read(self, stream: str, seq_num: int = 0, **options: Any) -> ReadBatch:
        self.named.append(stream)
        return await super().read(stream, seq_num, **options)

    async def check_tail(self, stream: str) -> int:
        self.named.append(stream)
        return await super().check_tail(stream)


@pytest.mark.parametrize("cast_id", ["jobs", "../../jobs/_cursor", "x" * 21 + "/", ""])
async def test_an_id_that_cannot_be_a_casts_names_no_stream(store: Store, cast_id: str) -> None:
    watched = NamedStreams(store)
    service = await service_on(watched)
    reader = service.reader
    watched.named.clear()  # the deployment secret, read as the service was made
    assert await reader.meta(cast_id) is None
    reads: list[Callable[[], Awaitable[Any]]] = [
        lambda: reader.tail(cast_id),
        lambda: reader.records(cast_id, 0),
        lambda: reader.captions(cast_id),
        lambda: reader.finished_file(cast_id),
        lambda: reader.ended(cast_id),
        lambda: service.status(cast_id),
        lambda: anext(reader.audio(cast_id)),
        lambda: anext(reader.chunks(cast_id)),
    ]
    for read in reads:
        with pytest.raises(CastNotFound):
            await read()
    assert watched.named == []


class BrokenStore(ForwardingStore):
    """A store whose reads fail while `broken`, naming the stream as real backends' errors
    do."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.broken = False

    def _check(self, stream: str) -> None:
        if self.broken:
            raise DurableError(f"reading {stream} failed: the disk went away")

    async def read(self, stream: str, seq_num: int = 0, **options: Any) -> ReadBatch:
        self._check(stream)
        return await super().read(stream, seq_num, **options)

    async def check_tail(self, stream: str) -> int:
        self._check(stream)
        return await super().check_tail(stream)

    async def append(
        self, stream: str, records: Sequence[AppendRecord], *, match_seq_num: int | None = None
    ) -> AppendAck:
        self._check(stream)
        return await super().append(stream, records, match_seq_num=match_seq_num)


async def test_a_store_failure_is_store_unavailable_with_one_line_naming_no_cast(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    await make_cast(store)
    broken = BrokenStore(store)
    service = await service_on(broken)
    reader = service.reader
    file = await reader.finished_file(CID)
    broken.broken = True
    reads: list[Callable[[], Awaitable[Any]]] = [
        lambda: reader.meta(CID),
        lambda: reader.tail(CID),
        lambda: reader.records(CID, 0, wait=1),
        lambda: reader.captions(CID),
        lambda: reader.ended(CID),
        lambda: reader.finished_file(CID),
        lambda: anext(reader.audio(CID)),
        lambda: anext(reader.chunks(CID)),
        lambda: anext(reader.file_bytes(CID, file, 0, file.size)),
        lambda: service.status(CID),
        lambda: service.latest_notice("w1"),
        lambda: service.receipts(0),
        lambda: service.queue_depth(),
    ]
    for read in reads:
        caplog.clear()
        with caplog.at_level(logging.INFO), pytest.raises(StoreUnavailable) as failed:
            await read()
        assert isinstance(failed.value.__cause__, DurableError)
        assert failed.value.status == 503 and failed.value.code == "store_unavailable"
        lines = [r for r in caplog.records if r.name.startswith("speechd")]
        assert [r.name for r in lines] == ["speechd.service"], [r.getMessage() for r in lines]
        assert "store unavailable while" in lines[0].getMessage()
        assert "disk went away" in lines[0].getMessage()
        assert CID not in lines[0].getMessage() and lines[0].exc_info is None
    broken.broken = False
    assert (await reader.records(CID, 0)).tail == 6  # the store is back: so is the read


async def test_receipts_go_on_from_the_first_kept_past_a_trim(store: Store) -> None:
    service = await service_on(store)
    assert await service.receipts(0) == ([], 0)
    done = [
        casts.schema.Receipt(f"cast{n}", 1, "w1", 1, 100, 10, 10.0) for n in range(5)
    ]
    await store.append(
        casts.schema.PROGRESS_DONE, [AppendRecord(casts.schema.encode(r)) for r in done]
    )
    assert await service.receipts(0) == (done, 5)
    await store.trim(casts.schema.PROGRESS_DONE, 3)
    assert await service.receipts(1) == (done[3:], 5)  # 1 and 2 were trimmed away
    assert await service.receipts(5) == ([], 5)


async def test_a_workers_latest_notice_unless_it_stopped(store: Store) -> None:
    service = await service_on(store)
    assert await service.latest_notice("w1") is None
    now = int(time.time() * 1000)
    for kind in ("ready", "heartbeat"):
        notice = casts.schema.WorkerNotice(kind=kind, worker="w1", time_ms=now, voices=["af_heart"])
        await store.append(
            casts.schema.worker_stream("w1"), [AppendRecord(casts.schema.encode(notice))]
        )
    latest = await service.latest_notice("w1")
    assert latest is not None and latest.kind == "heartbeat"
    stopped = casts.schema.WorkerNotice(kind="stopped", worker="w1", time_ms=now)
    await store.append(
        casts.schema.worker_stream("w1"), [AppendRecord(casts.schema.encode(stopped))]
    )
    assert await service.latest_notice("w1") is None
