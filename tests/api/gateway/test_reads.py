"""The public read path: JSON records with long-poll, and the audio file (live, then ranges),
of casts the real worker makes."""

from __future__ import annotations

import asyncio
import base64

import httpx
import pytest

from speechd.casts import CastState
from speechd.durable import Store
from tests.api.gateway._support import (
    StepEngine,
    attempt_bodies,
    chunk_texts,
    status_when,
    submit,
    whole_file,
)

# Four chunks in the worker's plan: 2, 4, 8 and 16 words.
TEXT = " ".join(f"word{i}" for i in range(30))
TEXTS = chunk_texts(TEXT)


def _headers(record: dict[str, object]) -> dict[str, str]:
    return dict(record["headers"])  # type: ignore[arg-type]


async def _done(store: Store, http: httpx.AsyncClient, text: str = TEXT, fmt: str = "wav") -> str:
    cast_id = await submit(http, text, response_format=fmt)
    await status_when(store, cast_id, lambda s: s.state in (CastState.DONE, CastState.FAILED))
    return cast_id


async def test_records_from_seq_0(store: Store, http: httpx.AsyncClient) -> None:
    assert len(TEXTS) == 4
    cast_id = await _done(store, http)
    page = (await http.get(f"/v1/casts/{cast_id}/records")).json()
    events = [_headers(r)["e"] for r in page["records"]]
    assert events == ["meta", "start", "audio", "audio", "audio", "audio", "eos"]
    assert page["tail"] == 7
    assert [r["seq_num"] for r in page["records"]] == list(range(7))
    audio = [r for r in page["records"] if _headers(r)["e"] == "audio"]
    bodies = [base64.b64decode(r["body"]) for r in audio]
    assert bodies == await attempt_bodies(store, cast_id)
    assert b"".join(bodies)[:4] == b"RIFF"
    assert [_headers(r)["t"] for r in audio] == TEXTS
    assert [(_headers(r)["a"], _headers(r)["i"]) for r in audio] == [
        ("1", str(i)) for i in range(4)
    ]
    # `n` is an estimate while the plan is made, exact on the record that ends the file.
    planned = [int(_headers(r)["n"]) for r in audio]
    assert planned[-1] == 4 and all(n > i + 1 for i, n in enumerate(planned[:-1]))


async def test_records_page_from_a_seq_with_a_limit(store: Store, http: httpx.AsyncClient) -> None:
    cast_id = await _done(store, http)
    page = (await http.get(f"/v1/casts/{cast_id}/records?seq_num=3&max_records=2")).json()
    assert [r["seq_num"] for r in page["records"]] == [3, 4]
    at_tail = (await http.get(f"/v1/casts/{cast_id}/records?seq_num=7")).json()
    assert at_tail == {"records": [], "tail": 7}
    past = await http.get(f"/v1/casts/{cast_id}/records?seq_num=8")
    assert past.status_code == 400
    assert past.json()["error"]["param"] == "seq_num"
    negative = await http.get(f"/v1/casts/{cast_id}/records?seq_num=-1")
    assert negative.status_code == 400
    assert negative.json()["error"]["type"] == "invalid_request_error"


async def test_records_long_poll_returns_when_a_record_lands(
    store: Store, engine: StepEngine, http: httpx.AsyncClient
) -> None:
    engine.hold()
    cast_id = await submit(http, TEXT)
    await status_when(store, cast_id, lambda s: s.state == CastState.GENERATING)  # meta, start
    poll = asyncio.create_task(http.get(f"/v1/casts/{cast_id}/records?seq_num=2&wait=20"))
    await asyncio.sleep(0.3)  # the poll waits at the tail: no record to answer with yet
    assert not poll.done()
    engine.allow(1)
    page = (await poll).json()
    assert [(_headers(r)["e"], _headers(r)["t"]) for r in page["records"]] == [("audio", TEXTS[0])]


async def test_records_long_poll_ends_empty(
    store: Store, engine: StepEngine, http: httpx.AsyncClient
) -> None:
    engine.hold()
    cast_id = await submit(http, TEXT)
    await status_when(store, cast_id, lambda s: s.state == CastState.GENERATING)
    page = (await http.get(f"/v1/casts/{cast_id}/records?seq_num=2&wait=0.4")).json()
    assert page == {"records": [], "tail": 2}


# -- the audio file, once done -------------------------------------------------------------


@pytest.fixture
async def done_cast(store: Store, http: httpx.AsyncClient) -> tuple[str, list[bytes]]:
    """A done wav cast and its audio bodies, record by record."""
    cast_id = await _done(store, http)
    return cast_id, await attempt_bodies(store, cast_id)


async def test_audio_of_a_done_cast_is_one_entity(
    done_cast: tuple[str, list[bytes]], http: httpx.AsyncClient
) -> None:
    cast_id, bodies = done_cast
    audio = whole_file(bodies)  # the records, with the true sizes in the wav header
    response = await http.get(f"/v1/casts/{cast_id}/audio")
    assert response.status_code == 200
    assert response.content == audio
    assert response.headers["content-length"] == str(len(audio))
    assert response.headers["content-type"] == "audio/wav"
    assert response.headers["accept-ranges"] == "bytes"
    assert response.headers["etag"].startswith('"')
    assert response.headers["x-cast-status"] == "done"
    assert response.content[:4] == b"RIFF"
    again = await http.get(f"/v1/casts/{cast_id}/audio")
    assert again.headers["etag"] == response.headers["etag"]


async def test_audio_if_none_match(
    done_cast: tuple[str, list[bytes]], http: httpx.AsyncClient
) -> None:
    cast_id, _ = done_cast
    url = f"/v1/casts/{cast_id}/audio"
    etag = (await http.get(url)).headers["etag"]
    for header in (etag, f'"other", {etag}', "*", f"W/{etag}"):
        cached = await http.get(url, headers={"if-none-match": header})
        assert cached.status_code == 304, header
        assert cached.content == b""
        assert cached.headers["etag"] == etag
    stale = await http.get(url, headers={"if-none-match": '"x"'})
    assert stale.status_code == 200


async def test_audio_byte_ranges(
    done_cast: tuple[str, list[bytes]], http: httpx.AsyncClient
) -> None:
    cast_id, bodies = done_cast
    audio = whole_file(bodies)
    size = len(audio)
    chunk = len(bodies[0])
    cases = {
        "bytes=0-0": (0, 1),
        "bytes=5-6": (5, 7),  # inside the header's RIFF size
        "bytes=42-45": (42, 46),  # across the end of the header
        "bytes=10-99": (10, 100),
        f"bytes={chunk - 5}-{chunk + 5}": (chunk - 5, chunk + 6),  # across a record boundary
        f"bytes={chunk}-": (chunk, size),
        "bytes=-100": (size - 100, size),
        f"bytes=0-{size * 2}": (0, size),
        f"bytes=-{size * 2}": (0, size),
        f"bytes={size - 1}-": (size - 1, size),
    }
    for header, (start, stop) in cases.items():
        response = await http.get(f"/v1/casts/{cast_id}/audio", headers={"range": header})
        assert response.status_code == 206, header
        assert response.content == audio[start:stop], header
        assert response.headers["content-range"] == f"bytes {start}-{stop - 1}/{size}"
        assert response.headers["content-length"] == str(stop - start)


async def test_audio_unsatisfiable_and_ignored_ranges(
    done_cast: tuple[str, list[bytes]], http: httpx.AsyncClient
) -> None:
    cast_id, bodies = done_cast
    audio = whole_file(bodies)
    size = len(audio)
    url = f"/v1/casts/{cast_id}/audio"
    for header in (f"bytes={size}-", f"bytes={size + 10}-{size + 20}", "bytes=-0"):
        response = await http.get(url, headers={"range": header})
        assert response.status_code == 416, header
        assert response.headers["content-range"] == f"bytes */{size}"
    # Malformed or multiple ranges: the whole file (a server may ignore Range).
    for header in ("bytes=5-2", "bytes=0-1,5-9", "items=0-1", "bytes=x-"):
        response = await http.get(url, headers={"range": header})
        assert response.status_code == 200, header
        assert response.content == audio
    # If-Range with another validator: the whole file, not a stale piece.
    etag = (await http.get(url)).headers["etag"]
    whole = await http.get(url, headers={"range": "bytes=0-9", "if-range": '"old"'})
    assert whole.status_code == 200
    piece = await http.get(url, headers={"range": "bytes=0-9", "if-range": etag})
    assert piece.status_code == 206


async def test_audio_of_a_failed_cast(store: Store, http: httpx.AsyncClient) -> None:
    cast_id = await _done(store, http, "A good start, then POISON in the second chunk.")
    response = await http.get(f"/v1/casts/{cast_id}/audio")
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["code"] == "cast_failed"
    assert "this chunk is poisoned" in error["message"]


async def test_audio_of_a_retried_cast_is_its_playable_sequence(
    store: Store, http: httpx.AsyncClient
) -> None:
    # The third chunk fails once: attempt 2 keeps the first two and carries the cast to its end.
    text = "One two. Three four five six. FLAKY eight nine ten eleven twelve thirteen fourteen."
    cast_id = await _done(store, http, text, fmt="pcm")
    view = (await http.get(f"/v1/casts/{cast_id}")).json()
    assert (view["status"], view["attempt"]) == ("done", 2)
    response = await http.get(f"/v1/casts/{cast_id}/audio")
    assert response.content == b"".join(await attempt_bodies(store, cast_id))
    assert len(response.content) == 2 * round(sum(StepEngine().durations(text)) * 24_000)
    assert response.headers["content-type"] == "audio/pcm"


# -- the audio file, live ------------------------------------------------------------------


async def test_audio_grows_live_while_generating(
    store: Store, engine: StepEngine, http: httpx.AsyncClient
) -> None:
    engine.hold()
    cast_id = await submit(http, TEXT, response_format="wav")
    engine.allow(1)
    await status_when(store, cast_id, lambda s: s.chunks_done == 1)
    async with http.stream("GET", f"/v1/casts/{cast_id}/audio") as response:
        assert response.status_code == 200
        assert "content-length" not in response.headers
        assert response.headers["cache-control"] == "no-store"
        assert response.headers["x-cast-status"] == "generating"
        received = bytearray()
        chunks = response.aiter_bytes()
        first_body = (await attempt_bodies(store, cast_id))[0]
        while len(received) < len(first_body):
            received += await anext(chunks)
        # The first chunk arrived while the cast is still generating; now let it finish.
        engine.run_free()
        async for data in chunks:
            received += data
    assert bytes(received) == b"".join(await attempt_bodies(store, cast_id))
    assert bytes(received[:4]) == b"RIFF"


async def test_live_audio_of_a_failing_cast_ends_incomplete(
    store: Store, engine: StepEngine, http: httpx.AsyncClient
) -> None:
    engine.hold()
    cast_id = await submit(
        http, "A good start, then POISON in the second chunk.", response_format="pcm"
    )
    engine.allow(1)
    await status_when(store, cast_id, lambda s: s.chunks_done == 1)
    received = bytearray()
    with pytest.raises(httpx.RemoteProtocolError):
        async with http.stream("GET", f"/v1/casts/{cast_id}/audio") as response:
            async for data in response.aiter_bytes():
                received += data
                engine.run_free()  # the second chunk fails for good, after the first is out
    assert len(received) > 0
    await status_when(store, cast_id, lambda s: s.state == CastState.FAILED)
