"""Live casts end to end on the cost model: a simulated LLM feeds a live cast over HTTP and over
the WebSocket, pausing mid-sentence, while a listener follows its audio; what is spoken is the
text sent, once each, in order, as one valid file that replays the same bytes."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from speechd.durable import EmbeddedStore, Store
from tests.support.live import (
    LiveApp,
    SimulatedLlm,
    decoded_seconds,
    playable,
    serve,
    wait_done,
)


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    opened = await EmbeddedStore.open(tmp_path / "data")
    yield opened
    await opened.close()


async def _follow(http: httpx.AsyncClient, cast_id: str) -> bytes:
    async with http.stream("GET", f"/v1/casts/{cast_id}/audio") as response:
        assert response.status_code == 200
        return b"".join([piece async for piece in response.aiter_bytes()])


async def _check_spoken(store: Store, cast_id: str, text: str, fmt: str, heard: bytes) -> None:
    await wait_done(store, cast_id)
    chunks = await playable(store, cast_id)
    assert [c.index for c in chunks] == list(range(len(chunks)))  # nothing twice, no gap
    captions = " ".join(c.text for c in chunks if c.text)
    assert captions.split() == text.split()  # every word, once, in order
    body = b"".join(c.body for c in chunks)
    assert heard == body  # the listener who followed it live heard the file
    spoken_ms = sum(c.duration_ms for c in chunks)
    assert abs(decoded_seconds(fmt, body) * 1000 - spoken_ms) < 100 + 30 * len(chunks)
    assert chunks[-1].planned == chunks[-1].index + 1  # only the last says it ends the file
    assert all(c.planned > c.index + 1 for c in chunks[:-1])


@pytest.mark.parametrize("fmt", ["mp3", "wav"])
async def test_an_llm_streamed_over_http_is_spoken_as_it_comes(store: Store, fmt: str) -> None:
    llm = SimulatedLlm()
    llm.pauses = {llm.mid_sentence()[2]: 1.0, llm.mid_sentence()[8]: 0.9}  # past the flush
    async with serve(store) as live, httpx.AsyncClient(base_url=live.url) as http:
        made = await http.post(
            "/v1/casts", json={"live": True, "voice": "af_heart", "response_format": fmt}
        )
        cast = made.json()
        auth = {"authorization": f"Bearer {cast['input_token']}"}
        listening = asyncio.create_task(_follow(http, cast["id"]))
        seq = 0
        async for token in llm.stream():
            sent = await http.post(
                cast["input_url"], json={"text": token, "seq": seq}, headers=auth
            )
            assert sent.status_code == 200, sent.text
            seq += 1
        await http.post(cast["input_url"], json={"done": True, "seq": seq}, headers=auth)
        heard = await asyncio.wait_for(listening, 60)
        await _check_spoken(store, cast["id"], llm.text, fmt, heard)
        replay = await http.get(f"/v1/casts/{cast['id']}/audio")
        assert replay.status_code == 200
        if fmt != "wav":  # a finished WAV file gets its true sizes; the rest is the same
            assert replay.content == heard
        else:
            assert replay.content[44:] == heard[44:]


async def _ws_session(live: LiveApp, llm: SimulatedLlm, **start: Any) -> dict[str, Any]:
    """Run one WebSocket session: its messages by type, and the audio it was sent."""
    got: dict[str, Any] = {"audio": b"", "captions": [], "accepted": [], "errors": []}
    async with websockets.connect(live.ws) as ws:
        await ws.send(json.dumps({"voice": "af_heart", **start}))
        got["cast"] = json.loads(await ws.recv())

        async def feed() -> None:
            async for token in llm.stream():
                await ws.send(json.dumps({"type": "input.append", "text": token}))
            await ws.send(json.dumps({"type": "input.done"}))

        feeding = asyncio.create_task(feed())
        async for message in ws:
            if isinstance(message, bytes):
                got["audio"] += message
                continue
            event = json.loads(message)
            kind = event["type"]
            if kind == "speech.audio.delta":
                got["audio"] += base64.b64decode(event["audio"])
            elif kind == "speech.audio.caption":
                got["captions"].append(event)
            elif kind == "input.accepted":
                got["accepted"].append(event)
            elif kind == "error":
                got["errors"].append(event)
            elif kind == "speech.audio.done":
                got["done"] = event
        await feeding
        got["close"] = ws.close_code
    return got


@pytest.mark.parametrize("stream_format", ["audio", "json"])
async def test_an_llm_streamed_over_the_websocket_is_spoken_as_it_comes(
    store: Store, stream_format: str
) -> None:
    llm = SimulatedLlm()
    llm.pauses = {llm.mid_sentence()[4]: 1.0}
    async with serve(store) as live:
        got = await _ws_session(
            live, llm, response_format="mp3", stream_format=stream_format, input="Well, "
        )
        text = "Well, " + llm.text
        cast = got["cast"]
        assert cast["type"] == "cast" and cast["url"].endswith(f"/c/{cast['id']}")
        assert not got["errors"] and got["close"] == 1000
        assert got["accepted"][-1]["done"] is True
        assert got["accepted"][-1]["chars"] == len("Well, ") + len("".join(llm.tokens))
        assert " ".join(c["text"] for c in got["captions"]).split() == text.split()
        indices = [c["index"] for c in got["captions"]]
        assert indices == sorted(set(indices))
        usage = got["done"]["usage"]
        assert usage["input_tokens"] == got["accepted"][-1]["chars"]
        assert usage["output_tokens"] > 0
        await _check_spoken(store, cast["id"], text, "mp3", got["audio"])
        async with httpx.AsyncClient(base_url=live.url) as http:
            assert (await http.get(f"/v1/casts/{cast['id']}/audio")).content == got["audio"]


async def test_a_dropped_socket_leaves_the_cast_to_be_finished_over_http(store: Store) -> None:
    async with serve(store) as live, httpx.AsyncClient(base_url=live.url) as http:
        async with websockets.connect(live.ws) as ws:
            await ws.send(json.dumps({"voice": "af_heart", "input": "First part, spoken"}))
            cast = json.loads(await ws.recv())
            await ws.send(json.dumps({"type": "input.append", "text": " over the socket."}))
            # The first message's input is accepted first (seq 1); wait for the append's own
            # acceptance: a piece the server never acknowledged may be lost with the socket.
            while True:
                message = json.loads(await ws.recv())
                if message["type"] == "input.accepted" and message["seq"] == 2:
                    break
        # The socket is gone; the input is still open: finish it with the token.
        auth = {"authorization": f"Bearer {cast['input_token']}"}
        more = {"text": " The rest came over HTTP.", "done": True}
        assert (await http.post(cast["input_url"], json=more, headers=auth)).status_code == 200
        await wait_done(store, cast["id"])
        spoken = " ".join(c.text for c in await playable(store, cast["id"]) if c.text)
        whole = "First part, spoken over the socket. The rest came over HTTP."
        assert spoken.split() == whole.split()


async def test_bad_websocket_messages_get_errors_and_the_session_goes_on(store: Store) -> None:
    async with serve(store) as live, websockets.connect(live.ws) as ws:
        await ws.send(json.dumps({"voice": "af_heart", "response_format": "pcm"}))
        assert json.loads(await ws.recv())["type"] == "cast"
        for bad in [
            "not json",
            json.dumps({"type": "input.shout", "text": "x"}),
            json.dumps({"type": "input.append", "text": "bell \x07"}),
            json.dumps({"type": "input.append", "text": "x" * 5000}),
            json.dumps({"type": "input.append"}),
        ]:
            await ws.send(bad)
            event = json.loads(await ws.recv())
            assert event["type"] == "error", bad
            assert set(event["error"]) >= {"message", "type", "param", "code"}
        await ws.send(b"binary")
        assert json.loads(await ws.recv())["type"] == "error"
        await ws.send(json.dumps({"type": "input.done", "text": "Fine after all."}))
        kinds = set()
        async for message in ws:
            if isinstance(message, str):
                kinds.add(json.loads(message)["type"])
        assert {"input.accepted", "speech.audio.caption", "speech.audio.done"} <= kinds
        assert ws.close_code == 1000


async def test_a_bad_first_message_ends_the_session(store: Store) -> None:
    async with serve(store) as live:
        for first in ['{"voice": "nobody"}', '{"speed": 99}', "[]", '{"response_format": "ogg"}']:
            async with websockets.connect(live.ws) as ws:
                await ws.send(first)
                event = json.loads(await ws.recv())
                assert event["type"] == "error"
                assert event["error"]["type"] == "invalid_request_error"
                with pytest.raises(websockets.ConnectionClosed):
                    await ws.recv()
                assert ws.close_code == 1008
