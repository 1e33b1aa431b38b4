"""The public read path: JSON records with long-poll, and the audio file (live, then ranges)."""

from __future__ import annotations

import asyncio
import base64
import time

import httpx
import pytest
from gateway_support import CastWriter, LiveServer, new_cast

from speechd.durable import Store

TEXTS = ["First part.", "Second part.", "Third part.", "Fourth part."]


def _headers(record: dict[str, object]) -> dict[str, str]:
    return dict(record["headers"])  # type: ignore[arg-type]


async def test_records_from_seq_0(store: Store, client: httpx.AsyncClient) -> None:
    cast = await new_cast(store, TEXTS)
    await cast.run(0.25)
    page = (await client.get(f"/v1/casts/{cast.id}/records")).json()
    events = [_headers(r)["e"] for r in page["records"]]
    assert events == ["meta", "start", "audio", "audio", "audio", "audio", "eos"]
    assert page["tail"] == 7
    assert [r["seq_num"] for r in page["records"]] == list(range(7))
    audio = [r for r in page["records"] if _headers(r)["e"] == "audio"]
    assert b"".join(base64.b64decode(r["body"]) for r in audio) == cast.audio
    assert [_headers(r)["t"] for r in audio] == TEXTS
    assert _headers(audio[1]) == {
        "e": "audio",
        "a": "1",
        "i": "1",
        "n": "4",
        "o": "250",
        "d": "250",
        "t": "Second part.",
    }


async def test_records_page_from_a_seq_with_a_limit(
    store: Store, client: httpx.AsyncClient
) -> None:
    cast = await new_cast(store, TEXTS)
    await cast.run(0.25)
    page = (await client.get(f"/v1/casts/{cast.id}/records?seq_num=3&max_records=2")).json()
    assert [r["seq_num"] for r in page["records"]] == [3, 4]
    at_tail = (await client.get(f"/v1/casts/{cast.id}/records?seq_num=7")).json()
    assert at_tail == {"records": [], "tail": 7}
    past = await client.get(f"/v1/casts/{cast.id}/records?seq_num=8")
    assert past.status_code == 400
    assert past.json()["error"]["param"] == "seq_num"
    negative = await client.get(f"/v1/casts/{cast.id}/records?seq_num=-1")
    assert negative.status_code == 400


async def test_records_long_poll_returns_when_a_record_lands(
    store: Store, client: httpx.AsyncClient
) -> None:
    cast = await new_cast(store, TEXTS)

    async def later() -> None:
        await asyncio.sleep(0.3)
        await cast.start()

    writer = asyncio.create_task(later())
    began = time.monotonic()
    page = (await client.get(f"/v1/casts/{cast.id}/records?seq_num=1&wait=10")).json()
    took = time.monotonic() - began
    await writer
    assert [_headers(r)["e"] for r in page["records"]] == ["start"]
    assert 0.25 < took < 5


async def test_records_long_poll_times_out_empty(store: Store, client: httpx.AsyncClient) -> None:
    cast = await new_cast(store, TEXTS)
    began = time.monotonic()
    page = (await client.get(f"/v1/casts/{cast.id}/records?seq_num=1&wait=0.4")).json()
    assert page == {"records": [], "tail": 1}
    assert 0.35 < time.monotonic() - began < 5


# -- the audio file, once done -------------------------------------------------------------


@pytest.fixture
async def done_cast(store: Store) -> CastWriter:
    cast = await new_cast(store, TEXTS, fmt="wav")
    await cast.run(0.25)
    return cast


async def test_audio_of_a_done_cast_is_one_entity(
    done_cast: CastWriter, client: httpx.AsyncClient
) -> None:
    response = await client.get(f"/v1/casts/{done_cast.id}/audio")
    assert response.status_code == 200
    assert response.content == done_cast.audio
    assert response.headers["content-length"] == str(len(done_cast.audio))
    assert response.headers["content-type"] == "audio/wav"
    assert response.headers["accept-ranges"] == "bytes"
    assert response.headers["etag"].startswith('"')
    assert response.content[:4] == b"RIFF"
    again = await client.get(f"/v1/casts/{done_cast.id}/audio")
    assert again.headers["etag"] == response.headers["etag"]


async def test_audio_if_none_match(done_cast: CastWriter, client: httpx.AsyncClient) -> None:
    etag = (await client.get(f"/v1/casts/{done_cast.id}/audio")).headers["etag"]
    for header in (etag, f'"other", {etag}', "*", f"W/{etag}"):
        cached = await client.get(
            f"/v1/casts/{done_cast.id}/audio", headers={"if-none-match": header}
        )
        assert cached.status_code == 304, header
        assert cached.content == b""
        assert cached.headers["etag"] == etag
    stale = await client.get(f"/v1/casts/{done_cast.id}/audio", headers={"if-none-match": '"x"'})
    assert stale.status_code == 200


async def test_audio_byte_ranges(done_cast: CastWriter, client: httpx.AsyncClient) -> None:
    audio = done_cast.audio
    size = len(audio)
    chunk = len(done_cast.bodies[0])
    cases = {
        "bytes=0-0": (0, 1),
        "bytes=10-99": (10, 100),
        f"bytes={chunk - 5}-{chunk + 5}": (chunk - 5, chunk + 6),  # across a record boundary
        f"bytes={chunk}-": (chunk, size),
        "bytes=-100": (size - 100, size),
        f"bytes=0-{size * 2}": (0, size),
        f"bytes=-{size * 2}": (0, size),
        f"bytes={size - 1}-": (size - 1, size),
    }
    for header, (start, stop) in cases.items():
        response = await client.get(f"/v1/casts/{done_cast.id}/audio", headers={"range": header})
        assert response.status_code == 206, header
        assert response.content == audio[start:stop], header
        assert response.headers["content-range"] == f"bytes {start}-{stop - 1}/{size}"
        assert response.headers["content-length"] == str(stop - start)


async def test_audio_unsatisfiable_and_ignored_ranges(
    done_cast: CastWriter, client: httpx.AsyncClient
) -> None:
    size = len(done_cast.audio)
    url = f"/v1/casts/{done_cast.id}/audio"
    for header in (f"bytes={size}-", f"bytes={size + 10}-{size + 20}", "bytes=-0"):
        response = await client.get(url, headers={"range": header})
        assert response.status_code == 416, header
        assert response.headers["content-range"] == f"bytes */{size}"
    # Malformed or multiple ranges: the whole file (a server may ignore Range).
    for header in ("bytes=5-2", "bytes=0-1,5-9", "items=0-1", "bytes=x-"):
        response = await client.get(url, headers={"range": header})
        assert response.status_code == 200, header
        assert response.content == done_cast.audio
    # If-Range with another validator: the whole file, not a stale piece.
    etag = (await client.get(url)).headers["etag"]
    whole = await client.get(url, headers={"range": "bytes=0-9", "if-range": '"old"'})
    assert whole.status_code == 200
    piece = await client.get(url, headers={"range": "bytes=0-9", "if-range": etag})
    assert piece.status_code == 206


async def test_audio_of_a_failed_cast(store: Store, client: httpx.AsyncClient) -> None:
    cast = await new_cast(store, TEXTS)
    await cast.start()
    await cast.chunk(0.25)
    await cast.error("the worker gave up")
    response = await client.get(f"/v1/casts/{cast.id}/audio")
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "cast_failed"


async def test_audio_of_a_retried_cast_is_the_latest_attempt(
    store: Store, client: httpx.AsyncClient
) -> None:
    cast = await new_cast(store, TEXTS, fmt="pcm")
    await cast.start()
    await cast.chunk(0.25)
    await cast.chunk(0.25)
    await cast.run(0.3)  # attempt 2: different lengths, so a mix-up would show
    response = await client.get(f"/v1/casts/{cast.id}/audio")
    assert response.content == cast.audio
    assert response.headers["content-type"] == "audio/pcm"


# -- the audio file, live ------------------------------------------------------------------


async def test_audio_grows_live_while_generating(store: Store, server: LiveServer) -> None:
    cast = await new_cast(store, TEXTS, fmt="wav")
    await cast.start()
    await cast.chunk(0.25)
    async with (
        httpx.AsyncClient(base_url=server.url) as http,
        http.stream("GET", f"/v1/casts/{cast.id}/audio") as response,
    ):
        assert response.status_code == 200
        assert "content-length" not in response.headers
        assert response.headers["cache-control"] == "no-store"
        received = bytearray()
        chunks = response.aiter_bytes()
        while len(received) < len(cast.bodies[0]):
            received += await anext(chunks)
        # The first chunk arrived while the cast is still generating; now finish it.
        for _ in TEXTS[1:]:
            await cast.chunk(0.25)
        await cast.eos()
        async for data in chunks:
            received += data
    assert bytes(received) == cast.audio


async def test_live_audio_of_a_failing_cast_ends_incomplete(
    store: Store, server: LiveServer
) -> None:
    cast = await new_cast(store, TEXTS, fmt="pcm")
    await cast.start()
    await cast.chunk(0.25)

    async def fail_soon() -> None:
        await asyncio.sleep(0.3)
        await cast.error("out of memory")

    failing = asyncio.create_task(fail_soon())
    async with httpx.AsyncClient(base_url=server.url) as http:
        with pytest.raises(httpx.RemoteProtocolError):
            async with http.stream("GET", f"/v1/casts/{cast.id}/audio") as response:
                async for _ in response.aiter_bytes():
                    pass
    await failing
