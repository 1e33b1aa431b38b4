"""The SSE tail: replay from a seq or Last-Event-ID, live following, keep-alives, one shared
reader per live cast, and a too-slow subscriber dropped without holding back the others."""

from __future__ import annotations

import asyncio
import json
import socket

import httpx
import pytest

from speechd.api.app import close_streams
from speechd.api.gateway import GatewaySettings
from speechd.casts import CastState
from speechd.durable import Store
from speechd.worker import Worker
from tests.api.gateway._support import (
    LiveServer,
    StepEngine,
    chunk_texts,
    serve,
    sse_events,
    status_when,
    submit,
    until,
)

# Three chunks in the worker's plan: 2, 4 and 8 words.
TEXT = "One two. Three four five six. Seven eight nine ten eleven twelve thirteen fourteen."
TEXTS = chunk_texts(TEXT)
EVENTS = ["meta", "start", "audio", "audio", "audio", "eos"]


async def _read_all(url: str, headers: dict[str, str] | None = None) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as http:
        return await http.get(url, headers=headers)


async def _done(store: Store, http: httpx.AsyncClient) -> str:
    cast_id = await submit(http, TEXT)
    await status_when(store, cast_id, lambda s: s.state == CastState.DONE)
    return cast_id


async def test_sse_replays_a_done_cast_and_ends(
    store: Store, server: LiveServer, http: httpx.AsyncClient
) -> None:
    assert len(TEXTS) == 3
    cast_id = await _done(store, http)
    response = await _read_all(f"{server.url}/v1/casts/{cast_id}/events")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response.text)
    assert events[0] == {"retry": "3000"}
    events = events[1:]
    assert [e["event"] for e in events] == EVENTS
    assert [int(e["id"]) for e in events] == list(range(6))
    record = json.loads(events[3]["data"])
    assert record["seq_num"] == 3
    assert dict(record["headers"])["t"] == TEXTS[1]


async def test_sse_resumes_after_last_event_id(
    store: Store, server: LiveServer, http: httpx.AsyncClient
) -> None:
    cast_id = await _done(store, http)
    url = f"{server.url}/v1/casts/{cast_id}/events"
    resumed = sse_events((await _read_all(url, {"last-event-id": "3"})).text)[1:]
    assert [int(e["id"]) for e in resumed] == [4, 5]
    from_seq = sse_events((await _read_all(f"{url}?seq_num=5")).text)[1:]
    assert [e["event"] for e in from_seq] == ["eos"]
    # Read to the end of a finished cast: 204 tells EventSource not to reconnect.
    finished = await _read_all(url, {"last-event-id": "5"})
    assert finished.status_code == 204
    bad = await _read_all(url, {"last-event-id": "nope"})
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "Last-Event-ID"
    past = await _read_all(f"{url}?seq_num=99")
    assert past.status_code == 400


async def test_last_event_id_wins_over_the_pages_seq_num(
    store: Store, server: LiveServer, http: httpx.AsyncClient
) -> None:
    """An EventSource reconnects to the URL it was opened with (`?seq_num=1`, the page's
    start) and says where it got to in `Last-Event-ID`: it goes on from there, with no event
    sent twice."""
    cast_id = await _done(store, http)
    url = f"{server.url}/v1/casts/{cast_id}/events?seq_num=1"
    resumed = sse_events((await _read_all(url, {"last-event-id": "3"})).text)[1:]
    assert [int(e["id"]) for e in resumed] == [4, 5]
    assert (await _read_all(url, {"last-event-id": "5"})).status_code == 204
    # Without the header, the page's seq_num holds.
    assert [int(e["id"]) for e in sse_events((await _read_all(url)).text)[1:]] == [1, 2, 3, 4, 5]


async def _collect(url: str, into: list[dict[str, str]], raw: list[str] | None = None) -> None:
    async with (
        httpx.AsyncClient(timeout=20) as http,
        http.stream("GET", url) as response,
    ):
        buffer = ""
        async for text in response.aiter_text():
            if raw is not None:
                raw.append(text)
            buffer += text
            *blocks, buffer = buffer.split("\n\n")
            for event in sse_events("\n\n".join(blocks)):
                into.append(event)


async def test_sse_follows_a_live_cast_with_keepalives(
    store: Store, engine: StepEngine, worker: Worker
) -> None:
    engine.hold()
    async with (
        serve(store, gateway=GatewaySettings(sse_keepalive_s=0.1)) as server,
        httpx.AsyncClient(base_url=server.url) as http,
    ):
        cast_id = await submit(http, TEXT)
        events: list[dict[str, str]] = []
        raw: list[str] = []
        reader = asyncio.create_task(
            _collect(f"{server.url}/v1/casts/{cast_id}/events", events, raw)
        )
        for _ in TEXTS:
            await asyncio.sleep(0.3)  # idle: keep-alives flow
            engine.allow(1)
        await asyncio.wait_for(reader, 20)
    names = [e["event"] for e in events if "event" in e]
    assert names == EVENTS
    assert [dict(json.loads(e["data"])["headers"])["t"] for e in events[3:6]] == TEXTS
    assert ": keep-alive" in "".join(raw)


async def test_subscribers_of_one_live_cast_share_one_reader(
    engine: StepEngine, server: LiveServer, http: httpx.AsyncClient
) -> None:
    engine.hold()
    cast_id = await submit(http, TEXT)
    url = f"{server.url}/v1/casts/{cast_id}/events"
    results: list[list[dict[str, str]]] = [[] for _ in range(3)]
    readers = [asyncio.create_task(_collect(url, r)) for r in results]
    await until(lambda: all(len(r) == 3 for r in results))  # retry, meta, start
    assert len(server.gateway.hubs) == 1
    engine.allow(1)
    await until(lambda: all(len(r) == 4 for r in results))
    late: list[dict[str, str]] = []
    readers.append(asyncio.create_task(_collect(url, late)))  # joins mid-cast
    await until(lambda: len(late) == 4)
    engine.run_free()
    await asyncio.wait_for(asyncio.gather(*readers), 20)
    assert len(server.gateway.hubs) == 0
    for events in [*results, late]:
        assert [e.get("event") for e in events][1:] == EVENTS


async def _stalled_subscriber(port: int, target: str) -> socket.socket:
    """A client that asks for the stream and then never reads (a tiny receive window)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, ("127.0.0.1", port))
    request = f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    await loop.sock_sendall(sock, request.encode())
    return sock


async def _drain(sock: socket.socket) -> bytes:
    loop = asyncio.get_running_loop()
    data = bytearray()
    while chunk := await loop.sock_recv(sock, 1 << 16):
        data += chunk
    sock.close()
    return bytes(data)


async def test_a_too_slow_subscriber_is_dropped_not_waited_for(
    store: Store, engine: StepEngine, worker: Worker
) -> None:
    # 30 chunks, most of 16 words (2 s of audio, ~130 kB as base64 in an SSE frame).
    text = " ".join(f"part{i}" for i in range(2 + 4 + 8 + 16 * 27))
    total = len(chunk_texts(text))
    engine.hold()
    async with (
        # Room for about four frames: a fast listener may lag a few chunks behind a burst.
        serve(store, gateway=GatewaySettings(sse_buffer_bytes=600_000)) as server,
        httpx.AsyncClient(base_url=server.url) as http,
    ):
        cast_id = await submit(http, text, response_format="wav")
        target = f"/v1/casts/{cast_id}/events"
        await status_when(store, cast_id, lambda s: s.state == CastState.GENERATING)
        stalled = await _stalled_subscriber(server.port, target)
        fast: list[dict[str, str]] = []
        reader = asyncio.create_task(_collect(server.url + target, fast))
        hubs = server.gateway.hubs
        await until(lambda: len(hubs) == 1 and len(fast) == 3)
        # One chunk at a time until the stalled one's buffers and queue are full and the
        # gateway lets it go.
        made = 0
        while hubs.dropped == 0:
            assert made < total, "the stalled subscriber was never dropped"
            engine.allow(1)
            made += 1
            await status_when(store, cast_id, lambda s, n=made: s.chunks_done >= n)
            await asyncio.sleep(0)
        engine.run_free()
        await asyncio.wait_for(reader, 60)
        # The fast subscriber got everything, the stalled one notwithstanding.
        assert [e.get("event") for e in fast].count("audio") == total
        assert fast[-1]["event"] == "eos"
        assert hubs.dropped == 1
        # The stalled one's connection is closed by the server: draining it reaches EOF, and
        # it never saw the end of the cast.
        data = await asyncio.wait_for(_drain(stalled), 10)
        assert b"event: eos" not in data
        assert data.startswith(b"HTTP/1.1 200")


async def test_closing_the_gateway_ends_every_stream(
    store: Store, engine: StepEngine, server: LiveServer, http: httpx.AsyncClient
) -> None:
    """Shutdown must not wait on casts still generating: SSE ends with `abort`, live audio
    ends incomplete, long-polls answer at once."""
    engine.hold()
    cast_id = await submit(http, TEXT)
    engine.allow(1)
    await status_when(store, cast_id, lambda s: s.chunks_done == 1)
    events: list[dict[str, str]] = []
    sse = asyncio.create_task(_collect(f"{server.url}/v1/casts/{cast_id}/events", events))
    poll = asyncio.create_task(http.get(f"/v1/casts/{cast_id}/records?seq_num=3&wait=30"))
    received = bytearray()

    async def listen() -> None:
        async with http.stream("GET", f"/v1/casts/{cast_id}/audio") as response:
            async for data in response.aiter_bytes():
                received.extend(data)

    audio = asyncio.create_task(listen())
    await until(lambda: len(events) == 4 and len(received) > 0)
    await asyncio.sleep(0.1)  # the long-poll is waiting too
    assert not poll.done()
    await close_streams(server.app)
    page = await asyncio.wait_for(poll, 10)
    await asyncio.wait_for(sse, 10)
    with pytest.raises(httpx.RemoteProtocolError):
        await asyncio.wait_for(audio, 10)
    assert page.json() == {"records": [], "tail": 3}
    assert events[-1]["event"] == "abort"
    assert json.loads(events[-1]["data"])["reason"] == "shutting_down"
