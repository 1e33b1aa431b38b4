"""The worker drives the real encoders: each cast's records are one valid file per format."""

from __future__ import annotations

import pytest

from harness.engines import CostEngine, expected_audio
from speechd.audio import FORMATS, new_encoder
from speechd.casts import cast_audio
from speechd.casts.schema import cast_stream
from speechd.durable import Store
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

TEXT = "one two three four five six seven eight nine ten eleven twelve"


@pytest.mark.parametrize("fmt", sorted(FORMATS))
async def test_every_format_makes_the_bytes_of_one_continuous_encoder(
    store: Store, fmt: str
) -> None:
    cid = await submit_text(store, TEXT, fmt=fmt)
    async with running(make_worker(store, encoders=new_encoder)):
        await wait_ended(store, [cid])
    expected = expected_audio(cid, TEXT, fmt=fmt, encoders=new_encoder)
    assert complete_audio(await records(store, cast_stream(cid))) == expected
    assert b"".join([b async for b in cast_audio(store, cid)]) == expected


async def test_a_retry_splices_to_the_same_mp3(store: Store) -> None:
    text = "one two three four five six seven FLAKY eight nine ten"
    cid = await submit_text(store, text, fmt="mp3")
    async with running(make_worker(store, encoders=new_encoder)):
        await wait_ended(store, [cid])
    stream = await records(store, cast_stream(cid))
    assert len(check_layout(stream)) == 2
    assert complete_audio(stream) == expected_audio(cid, text, fmt="mp3", encoders=new_encoder)


async def test_a_long_chunk_is_split_into_records_that_fit(store: Store) -> None:
    # At 0.25x speed this one chunk is 32 s of audio: three records of at most 15 s.
    engine = CostEngine(audio_per_char=0.5)
    text = "aaaaaaa bbbbbbbb"
    cid = await submit_text(store, text, fmt="wav", speed=0.25)
    async with running(make_worker(store, engine, encoders=new_encoder)):
        await wait_ended(store, [cid])
    stream = await records(store, cast_stream(cid))
    audio = check_layout(stream)[-1][1:]
    assert [r.header(b"t") for r in audio] == [b"aaaaaaa bbbbbbbb", b"", b""]
    assert [r.header(b"n") for r in audio] == [b"3", b"3", b"3"]
    assert all(int(r.header(b"d") or b"0") <= MAX_RECORD_S * 1000 for r in audio)
    expected = expected_audio(
        cid,
        text,
        speed=0.25,
        fmt="wav",
        encoders=new_encoder,
        engine=CostEngine(audio_per_char=0.5),
    )
    assert complete_audio(stream) == expected
