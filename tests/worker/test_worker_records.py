"""Audio records and append batches fit the store's limits, whatever the format: a long chunk
becomes more records (each a whole encoder call, with its own words), and a record that does
not fit fails its chunk instead of the worker."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from harness.engines import CostEngine, FakeEncoder, expected_audio
from harness.forwarding import ForwardingStore
from speechd.audio import new_encoder
from speechd.casts import cast_audio
from speechd.casts._words import cast_captions
from speechd.casts.schema import Failure, cast_stream, decode
from speechd.durable import AppendAck, AppendRecord, Limits, RecordTooLarge, Store
from speechd.durable._contract import record_size
from speechd.worker._render import MAX_RECORD_S

from ._helpers import (
    check_layout,
    complete_audio,
    make_worker,
    records,
    running,
    submit_text,
    wait_ended,
)

LONG = "aaaaaaa bbbbbbbb"  # one chunk; 32 s of audio at audio_per_char 0.5 and speed 0.25


def long_engine() -> CostEngine:
    return CostEngine(audio_per_char=0.5, rtf=0.001)


class Limited(ForwardingStore):
    """Another store that accepts only what `limits` allow (and says so in `limits`)."""

    def __init__(self, inner: Store, limits: Limits) -> None:
        super().__init__(inner)
        self._limits = limits
        self.batches: list[int] = []  # records per append

    @property
    def limits(self) -> Limits:
        return self._limits

    async def append(
        self, stream: str, records: Sequence[AppendRecord], *, match_seq_num: int | None = None
    ) -> AppendAck:
        if len(self._limits.batches(records)) > 1:  # raises for a record over the limits
            raise RecordTooLarge("a batch over this store's limits")
        self.batches.append(len(records))
        return await self.inner.append(stream, records, match_seq_num=match_seq_num)


SMALL = Limits(max_record_bytes=128 * 1024, max_batch_records=4, max_batch_bytes=300 * 1024)


async def submit_long(store: Store, fmt: str) -> str:
    return await submit_text(store, LONG, fmt=fmt, speed=0.25)


@pytest.mark.parametrize("fmt", ["pcm", "wav", "flac", "mp3"])
async def test_a_long_chunk_on_a_small_store_becomes_records_that_fit(
    store: Store, fmt: str
) -> None:
    small = Limited(store, SMALL)
    cid = await submit_long(small, fmt)
    async with running(make_worker(small, long_engine(), encoders=new_encoder)):
        assert await wait_ended(small, [cid]) == {cid: "eos"}
    stream = await records(store, cast_stream(cid))
    audio = check_layout(stream)[-1][1:]
    assert len(audio) > 32 / MAX_RECORD_S + 1  # the limit bound, not the 15 s cap
    assert all(record_size(r) <= SMALL.max_record_bytes for r in audio)
    assert max(small.batches) <= SMALL.max_batch_records
    # Each record is one whole encoder call: the first carries the text, every one says how
    # many the sequence holds, and the whole is one continuous file (for pcm and wav, the
    # same bytes however the chunk was cut).
    assert [r.header(b"t") for r in audio] == [LONG.encode()] + [b""] * (len(audio) - 1)
    assert {r.header(b"n") for r in audio} == {str(len(audio)).encode()}
    played = b"".join([b async for b in cast_audio(store, cid)])
    assert played == complete_audio(stream)
    if fmt in ("pcm", "wav"):
        expected = expected_audio(
            cid, LONG, speed=0.25, fmt=fmt, encoders=new_encoder, engine=long_engine()
        )
        assert played == expected
    # The words stay with the records they start in: the captions are the chunk's, in order.
    captions = await cast_captions(store, cid)
    assert [w.text for w in captions.words] == LONG.split()
    starts = [w.start_ms for w in captions.words]
    assert starts == sorted(starts)


class Bloated(FakeEncoder):
    """An encoder that returns, for pcm, twice the bytes the worker expects of that format."""

    def encode(self, pcm: np.ndarray, *, final: bool = False) -> bytes:
        body = super().encode(pcm, final=final)
        return body + body if self.format == "pcm" else body


async def test_a_record_over_the_limit_fails_its_chunk_not_the_worker(store: Store) -> None:
    small = Limited(store, SMALL)
    too_big = await submit_long(small, "pcm")
    async with running(make_worker(small, long_engine(), encoders=Bloated, retries=1)):
        ends = await wait_ended(small, [too_big])
        # The worker lives on: a short cast after it is made.
        short = await submit_text(small, "short and fine", fmt="wav")
        ends.update(await wait_ended(small, [short]))
    assert ends == {too_big: "error", short: "eos"}
    stream = await records(store, cast_stream(too_big))
    failure = decode(stream[-1].body, Failure)
    assert "at most" in failure.message
    assert all(r.header(b"e") != b"audio" for r in stream)  # nothing of it was appended


async def test_a_store_too_small_for_audio_fails_the_cast_with_a_clear_error(
    store: Store,
) -> None:
    tiny = Limited(store, Limits(max_record_bytes=40 * 1024, max_batch_records=10,
                                 max_batch_bytes=400 * 1024))  # fmt: skip
    cid = await submit_text(tiny, "some words to say")
    async with running(make_worker(tiny, encoders=FakeEncoder, retries=0)):
        assert await wait_ended(tiny, [cid]) == {cid: "error"}
    stream = await records(store, cast_stream(cid))
    assert "cannot hold" in decode(stream[-1].body, Failure).message


@pytest.mark.nats
@pytest.mark.parametrize("fmt", ["pcm", "wav"])
async def test_long_pcm_chunks_on_a_stock_nats_server(stock_store: Store, fmt: str) -> None:
    assert stock_store.limits.max_record_bytes < 1024 * 1024  # 1 MiB messages, as it comes
    cid = await submit_long(stock_store, fmt)
    async with running(make_worker(stock_store, long_engine(), encoders=new_encoder)):
        assert await wait_ended(stock_store, [cid], within=60) == {cid: "eos"}
    stream = await records(stock_store, cast_stream(cid))
    audio = check_layout(stream)[-1][1:]
    assert len(audio) == 3  # 32 s: three records of at most 15 s, each under 1 MiB
    assert all(record_size(r) <= stock_store.limits.max_record_bytes for r in audio)
    expected = expected_audio(
        cid, LONG, speed=0.25, fmt=fmt, encoders=new_encoder, engine=long_engine()
    )
    assert complete_audio(stream) == expected
