"""The SSE tail: replay from a seq or Last-Event-ID, live following, keep-alives, one shared
reader per live cast, and a too-slow subscriber dropped without holding back the others."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import httpx
import pytest
from gateway_support import (
    CastWriter,
    LiveServer,
    live_server,
    make_app,
    make_gateway,
    new_cast,
    sse_events,
    until,
)

from speechd.durable import Store
from speechd.gateway import Gateway

TEXTS = ["One.", "Two.", "Three."]


async def _read_all(url: str, headers: dict[str, str] | None = None) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as http:
        return await http.get(url, headers=headers)


async def test_sse_replays_a_done_cast_and_ends(store: Store, server: LiveServer) -> None:
    cast = await new_cast(store, TEXTS)
    await cast.run(0.2)
    response = await _read_all(f"{server.url}/v1/casts/{cast.id}/events")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response.text)
    assert events[0] == {"retry": "3000"}
    events = events[1:]
    assert [e["event"] for e in events] == ["meta", "start", "audio", "audio", "audio", "eos"]
    assert [int(e["id"]) for e in events] == list(range(6))
    record = json.loads(events[3]["data"])
    assert record["seq_num"] == 3
    assert dict(record["headers"])["t"] == "Two."


async def test_sse_resumes_after_last_event_id(store: Store, server: LiveServer) -> None:
    cast = await new_cast(store, TEXTS)
    await cast.run(0.2)
    url = f"{server.url}/v1/casts/{cast.id}/events"
    resumed = sse_events((await _read_all(url, {"last-event-id": "3"})).text)[1:]
    assert [int(e["id"]) for e in resumed] == [4, 5]
    from_seq = sse_events((await _read_all(f"{url}?seq_num=5")).text)[1:]
    assert [e["event"] for e in from_seq] == ["eos"]
    # Read to the end of a finished cast: 204 tells EventSource not to reconnect.
    finished = await _read_all(url, {"last-event-id": "5"})
    assert finished.status_code == 204
    bad = await _read_all(url, {"last-event-id": "nope"})
    assert bad.status_code == 400
    past = await _read_all(f"{url}?seq_num=99")
    assert past.status_code == 400


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


async def test_sse_follows_a_live_cast_with_keepalives(store: Store) -> None:
    gateway = make_gateway(store, sse_keepalive_s=0.1)
    cast = await new_cast(store, TEXTS)
    async with live_server(make_app(gateway)) as server:
        events: list[dict[str, str]] = []
        raw: list[str] = []
        reader = asyncio.create_task(
            _collect(f"{server.url}/v1/casts/{cast.id}/events", events, raw)
        )
        await cast.start()
        for _ in TEXTS:
            await asyncio.sleep(0.3)
            await cast.chunk(0.2)
        await asyncio.sleep(0.3)
        await cast.eos()
        await asyncio.wait_for(reader, 10)
    names = [e["event"] for e in events if "event" in e]
    assert names == ["meta", "start", "audio", "audio", "audio", "eos"]
    assert ": keep-alive" in "".join(raw)
    await gateway.close()


async def test_subscribers_of_one_live_cast_share_one_reader(store: Store) -> None:
    gateway = make_gateway(store)
    cast = await new_cast(store, TEXTS)
    async with live_server(make_app(gateway)) as server:
        url = f"{server.url}/v1/casts/{cast.id}/events"
        results: list[list[dict[str, str]]] = [[] for _ in range(3)]
        readers = [asyncio.create_task(_collect(url, r)) for r in results]
        await cast.start()
        await until(lambda: all(len(r) == 3 for r in results))  # retry, meta, start
        assert len(gateway.hubs) == 1
        await cast.chunk(0.2)
        late: list[dict[str, str]] = []
        readers.append(asyncio.create_task(_collect(url, late)))  # joins mid-cast
        await asyncio.sleep(0.2)
        for _ in TEXTS[1:]:
            await cast.chunk(0.2)
        await cast.eos()
        await asyncio.wait_for(asyncio.gather(*readers), 10)
        assert len(gateway.hubs) == 0
    for events in [*results, late]:
        assert [e.get("event") for e in events][1:] == [
            "meta",
            "start",
            "audio",
            "audio",
            "audio",
            "eos",
        ]
    await gateway.close()


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


async def test_a_too_slow_subscriber_is_dropped_not_waited_for(store: Store) -> None:
    gateway: Gateway = make_gateway(store, sse_buffer=4)
    cast: CastWriter = await new_cast(store, [f"Part {i}." for i in range(400)])
    async with live_server(make_app(gateway)) as server:
        target = f"/v1/casts/{cast.id}/events"
        await cast.start()
        stalled = await _stalled_subscriber(server.port, target)
        fast: list[dict[str, str]] = []
        reader = asyncio.create_task(_collect(server.url + target, fast))
        await until(lambda: len(gateway.hubs) == 1 and len(fast) == 3)
        # Big records (2 s of audio, ~130 kB as base64) until the stalled one's buffers and
        # queue are full and the gateway lets it go.
        began = time.monotonic()
        while gateway.hubs.dropped == 0:
            assert cast.index < 400, "the stalled subscriber was never dropped"
            await cast.chunk(2.0)
            await asyncio.sleep(0)
        sent = cast.index
        await cast.eos()
        await asyncio.wait_for(reader, 10)
        took = time.monotonic() - began
        # The fast subscriber got everything, promptly, the stalled one notwithstanding.
        assert [e.get("event") for e in fast].count("audio") == sent
        assert fast[-1]["event"] == "eos"
        assert took < 20
        assert gateway.hubs.dropped == 1
        # The stalled one's connection is closed by the server: draining it reaches EOF, and
        # it never saw the end of the cast.
        data = await asyncio.wait_for(_drain(stalled), 10)
        assert b"event: eos" not in data
        assert data.startswith(b"HTTP/1.1 200")
    await gateway.close()


async def test_closing_the_gateway_ends_every_stream(store: Store) -> None:
    """Shutdown must not wait on casts still generating: SSE ends with `abort`, live audio
    ends incomplete, long-polls answer at once."""
    gateway = make_gateway(store)
    cast = await new_cast(store, TEXTS)
    await cast.start()
    await cast.chunk(0.2)
    async with (
        live_server(make_app(gateway)) as server,
        httpx.AsyncClient(base_url=server.url, timeout=10) as http,
    ):
        events: list[dict[str, str]] = []
        sse = asyncio.create_task(_collect(f"{server.url}/v1/casts/{cast.id}/events", events))
        poll = asyncio.create_task(http.get(f"/v1/casts/{cast.id}/records?seq_num=3&wait=30"))
        received = bytearray()

        async def listen() -> None:
            async with http.stream("GET", f"/v1/casts/{cast.id}/audio") as response:
                async for data in response.aiter_bytes():
                    received.extend(data)

        audio = asyncio.create_task(listen())
        await until(lambda: len(events) == 4 and len(received) > 0)
        await asyncio.sleep(0.1)  # the long-poll is waiting too
        began = time.monotonic()
        await gateway.close()
        page = await asyncio.wait_for(poll, 3)
        await asyncio.wait_for(sse, 3)
        with pytest.raises(httpx.RemoteProtocolError):
            await asyncio.wait_for(audio, 3)
        assert time.monotonic() - began < 3
    assert page.json() == {"records": [], "tail": 3}
    assert events[-1]["event"] == "abort"
    assert json.loads(events[-1]["data"])["reason"] == "shutting_down"
