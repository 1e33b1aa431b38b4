"""Readers who ask a lot or read slowly cost the server what they ask for, not what the cast
weighs (issue 27): `/words`, the captions and a done file's layout read headers, never the
audio, and each record once per api; a `stream: false` answer streams the finished file with
its size up front; public records carry only the allow-listed headers; and a cast removed and
made again under its id gets fresh layouts, captions and ETags."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator

import httpx

from speechd.casts import CastState
from speechd.casts._records import PUBLIC_HEADERS
from speechd.casts._retention import CAST_STREAM_PREFIXES
from speechd.casts.schema import (
    AudioChunk,
    Eos,
    Start,
    Word,
    audio_record,
    cast_stream,
    eos_record,
    start_record,
)
from speechd.durable import AppendRecord, Store
from tests.api.gateway._support import (
    StepEngine,
    attempt_bodies,
    running_worker,
    serve,
    status_when,
    submit,
    whole_file,
)
from tests.support.counting import CountingStore

WORDS = " ".join(f"word{n}." if n % 7 == 6 else f"word{n}" for n in range(400))


async def test_words_and_captions_read_what_is_new_never_the_audio(store: Store) -> None:
    engine = StepEngine()
    engine.hold()
    counting = CountingStore(store)
    async with (
        running_worker(store, engine),
        serve(counting) as live,
        httpx.AsyncClient(base_url=live.url, timeout=30) as http,
    ):
        cast_id = await submit(http, WORDS, response_format="wav")
        costs: list[int] = []
        for made in range(1, 25):
            engine.allow(1)
            await status_when(store, cast_id, lambda s, n=made: s.chunks_done >= n)
            for route in ("words", "captions.vtt", "captions.srt"):
                before = counting.read_bytes
                answer = await http.get(f"/v1/casts/{cast_id}/{route}")
                assert answer.status_code == 200, answer.text
                costs.append(counting.read_bytes - before)
        words = (await http.get(f"/v1/casts/{cast_id}/words")).json()["words"]
        assert [w["word"] for w in words] == WORDS.split()[: len(words)]
        audio = sum(len(b) for b in await attempt_bodies(store, cast_id))
    # 24 records of about 100 kB of wav each: reading them (as every request did) would cost
    # megabytes by the end; each request costs the cast's head and the one new record's
    # headers, and a caption file made after /words reads only the head.
    assert audio > 2_000_000
    assert max(costs) < 16_000, costs


async def test_a_done_files_layout_reads_no_audio(store: Store) -> None:
    engine = StepEngine()
    async with running_worker(store, engine), serve(store) as made:
        async with httpx.AsyncClient(base_url=made.url, timeout=30) as http:
            cast_id = await submit(http, WORDS, response_format="wav")
        await status_when(store, cast_id, lambda s: s.state == CastState.DONE)
    counting = CountingStore(store)
    async with serve(counting) as live, httpx.AsyncClient(base_url=live.url, timeout=30) as http:
        # A fresh api: nothing cached. A 304 and a one-byte range lay the file out first.
        tag = {"if-none-match": '"not-this-one", *'}
        assert (await http.get(f"/v1/casts/{cast_id}/audio", headers=tag)).status_code == 304
        assert counting.read_bytes < 32_000
        one = await http.get(f"/v1/casts/{cast_id}/audio", headers={"range": "bytes=0-0"})
        assert one.status_code == 206 and len(one.content) == 1
        biggest = max(len(b) for b in await attempt_bodies(store, cast_id))
        assert counting.read_bytes < 32_000 + biggest  # the one record the byte is in


async def _slow_post(port: int, path: str, body: dict[str, object]) -> AsyncIterator[bytes]:
    """POST `body` as JSON and yield the answer's head, then its body a piece at a time, from
    a socket whose receive buffer is held small (no kernel autotuning: what the server has
    read ahead of the client is then the server's, not the loopback's)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 * 1024)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock)
    data = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    )
    writer.write(head.encode() + data)
    await writer.drain()
    try:
        yield await reader.readuntil(b"\r\n\r\n")
        while piece := await reader.read(64 * 1024):
            yield piece
    finally:
        writer.close()


async def test_stream_false_streams_the_finished_file_with_its_size_up_front(
    store: Store,
) -> None:
    """About 40 MB of wav: the answer says its size and starts before the api has read more
    than a few records of it, and the api never reads much further ahead than the client has
    taken (a few records, and the socket's send buffer)."""
    engine = StepEngine(rtf=0.0, audio_per_char=1.0)
    counting = CountingStore(store)
    text = " ".join(f"w{n:03d}" for n in range(170))  # ~850 characters: ~14 minutes
    body = {"model": "tts-1", "voice": "alloy", "input": text, "response_format": "wav"}
    async with running_worker(store, engine), serve(counting) as live:
        answer = _slow_post(live.port, "/v1/audio/speech", {**body, "stream": False})
        # A far-off ceiling: making the cast takes a few seconds, answering it none.
        lines = (await asyncio.wait_for(anext(answer), 300)).decode("latin-1").split("\r\n")
        assert lines[0].startswith("HTTP/1.1 200")
        headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:] if h)}
        size = int(headers["content-length"])
        assert "transfer-encoding" not in headers and size > 30_000_000
        assert counting.read_bytes < 8_000_000  # headers only, so far: nothing of the audio
        got = bytearray()
        async for piece in answer:
            got += piece
            assert counting.read_bytes - len(got) < 12_000_000
            await asyncio.sleep(0.001)
        assert len(got) == size
        cast_id = headers["x-cast-id"]
        assert bytes(got) == whole_file(await attempt_bodies(store, cast_id))
        async with httpx.AsyncClient(base_url=live.url, timeout=120) as http:
            assert bytes(got) == (await http.get(f"/v1/casts/{cast_id}/audio")).content


async def _fake_cast(store: Store, cast_id: str, bodies: list[bytes], word: str) -> None:
    """A finished cast's records after its meta, as a worker writes them."""
    stream = cast_stream(cast_id)
    records = [start_record(Start(1, "w1", len(bodies)))]
    offset = 0
    for i, data in enumerate(bodies):
        chunk = AudioChunk(
            1, i, len(bodies), offset, 100, word, data, words=(Word(0, 50, word),), unit="word",
            plan=f"plan {i}", start_seq=1, resume=b"checkpoint" if i else b"",
        )  # fmt: skip
        records.append(audio_record(chunk))
        offset += 100
    records.append(eos_record(1, Eos(len(bodies), offset, 1), 1))
    await store.append(stream, records)


async def test_public_records_carry_only_the_allow_listed_headers(
    store: Store, http: httpx.AsyncClient
) -> None:
    cast_id = await submit(http, WORDS[:300], response_format="mp3")
    await status_when(store, cast_id, lambda s: s.state == CastState.DONE)
    # What the worker wrote holds private headers (the plan position, the checkpoint); a
    # newer writer's header must not leak either, until it is named public.
    stream = cast_stream(cast_id)
    await store.append(stream, [AppendRecord(b"x", ((b"e", b"note"), (b"z", b"secret")))])
    stored = {k for r in (await store.read(stream)).records for k, _ in r.headers}
    assert {b"p", b"k", b"z"} <= stored
    public = {name.decode() for name in PUBLIC_HEADERS}
    records = (await http.get(f"/v1/casts/{cast_id}/records")).json()["records"]
    seen = {name for record in records for name, _ in record["headers"]}
    assert seen <= public
    assert {"e", "a", "i", "n", "o", "d", "t", "w", "u", "x"} <= seen  # what players read
    events = (await http.get(f"/v1/casts/{cast_id}/events")).text
    framed = [json.loads(line[6:]) for line in events.splitlines() if line.startswith("data: ")]
    assert framed and {n for f in framed for n, _ in f["headers"]} <= public


async def test_a_cast_made_again_under_its_id_gets_fresh_caches(
    store: Store, http: httpx.AsyncClient
) -> None:
    """Retention removed a done cast, and it was made again under its id with as many
    records as before: its file, ETag, words and captions are the new stream's."""
    cast_id = await submit(http, WORDS[:200], response_format="pcm")
    await status_when(store, cast_id, lambda s: s.state == CastState.DONE)
    first = await http.get(f"/v1/casts/{cast_id}/audio")
    first_words = (await http.get(f"/v1/casts/{cast_id}/words")).json()["words"]
    assert (await http.get(f"/v1/casts/{cast_id}/captions.vtt")).status_code == 200
    stream = cast_stream(cast_id)
    tail = await store.check_tail(stream)
    meta = (await store.read(stream, 0, max_records=1)).records[0]
    for prefix in CAST_STREAM_PREFIXES:
        await store.delete(prefix + cast_id)
    await asyncio.sleep(0.01)  # a later birth, by the store's clock
    await store.append(stream, [AppendRecord(meta.body, meta.headers)])
    await _fake_cast(store, cast_id, [b"\x07\x00" * 1500] * (tail - 3), "again")
    assert await store.check_tail(stream) == tail
    second = await http.get(f"/v1/casts/{cast_id}/audio")
    assert second.content == b"\x07\x00" * 1500 * (tail - 3) != first.content
    assert second.headers["etag"] != first.headers["etag"]
    words = (await http.get(f"/v1/casts/{cast_id}/words")).json()["words"]
    assert {w["word"] for w in words} == {"again"} and words != first_words
    assert "again" in (await http.get(f"/v1/casts/{cast_id}/captions.vtt")).text
