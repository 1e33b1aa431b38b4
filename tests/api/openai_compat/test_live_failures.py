"""A live cast that fails is closed to input, and its writer is answered with the cast's own
error (issue 27 item 10): before its first piece too, where the worker used to leave the input
open and every later piece got 200 `input.accepted`, never to be spoken."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from harness.engines import CostEngine, FakeChunkPolicy
from harness.forwarding import ForwardingStore
from speechd.casts.schema import InputEnd, input_event, input_stream
from speechd.durable import AppendAck, EmbeddedStore, Store
from tests.support.live import serve
from tests.support.streams import read_stream


class Unplannable(CostEngine):
    """The cost model, whose planner cannot open a cast's plan: the worker gives the cast up
    as it starts it, before any text came."""

    def planner(self, voice: str, policy: FakeChunkPolicy, **options: Any) -> Any:
        raise ValueError("the planner is out of order")


class FailsOnText(CostEngine):
    """The cost model, whose planner cannot plan any text it is fed: a live cast fails on
    its first piece, after that piece was taken in."""

    def planner(self, voice: str, policy: FakeChunkPolicy, **options: Any) -> Any:
        planner = super().planner(voice, policy, **options)
        step = planner.step

        def failing_step(idle_s: float | None = None) -> Any:
            if planner.chars_left:
                raise ValueError("the planner is out of order")
            return step(idle_s)

        planner.step = failing_step
        return planner


class HeldPiece(ForwardingStore):
    """A store that takes a live cast's first piece in at once and answers it only when
    `answer` is set."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.taken = asyncio.Event()
        self.answer = asyncio.Event()

    async def append(
        self, stream: str, records: Any, *, match_seq_num: int | None = None
    ) -> AppendAck:
        ack = await self.inner.append(stream, records, match_seq_num=match_seq_num)
        if stream.startswith(input_stream("")) and not self.taken.is_set():
            self.taken.set()
            await asyncio.wait_for(self.answer.wait(), 30)
        return ack


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    opened = await EmbeddedStore.open(tmp_path / "data")
    yield opened
    await opened.close()


async def _failed(http: httpx.AsyncClient, cast_id: str) -> None:
    for _ in range(600):
        if (await http.get(f"/v1/casts/{cast_id}")).json()["status"] == "failed":
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the cast never failed")


async def test_a_live_cast_failed_before_its_first_piece_answers_pieces_with_its_error(
    store: Store,
) -> None:
    async with serve(store, engine=Unplannable()) as live:
        async with httpx.AsyncClient(base_url=live.url, timeout=30) as http:
            made = (await http.post("/v1/casts", json={"live": True})).json()
            await _failed(http, made["id"])
            token = {"authorization": f"Bearer {made['input_token']}"}
            for body in ({"text": "Hello there.", "seq": 0}, {"done": True}):
                answer = await http.post(made["input_url"], json=body, headers=token)
                assert answer.status_code == 500, answer.text
                error = answer.json()["error"]
                assert error["code"] == "cast_failed"
                assert "out of order" in error["message"]
        # The input was closed by the worker, with nothing in it.
        records = await read_stream(store, input_stream(made["id"]))
        assert [input_event(r) for r in records] == [InputEnd("abandoned", 0, 0)]
        # Over the WebSocket: the session says the cast failed and ends there (a piece sent
        # before the worker gave the cast up may have been taken).
        async with websockets.connect(live.ws) as ws:
            await ws.send('{"voice": "af_heart"}')
            messages = [json.loads(await ws.recv())]
            assert messages[0]["type"] == "cast"
            with contextlib.suppress(websockets.ConnectionClosed):
                for _ in range(200):
                    await ws.send('{"type": "input.append", "text": "Anyone there? "}')
                    messages.append(json.loads(await asyncio.wait_for(ws.recv(), 30)))
        assert messages[-1]["type"] == "error", messages
        assert messages[-1]["error"]["code"] == "cast_failed"


async def test_a_piece_answered_while_the_error_is_sent_is_not_answered_after_it(
    store: Store,
) -> None:
    """The session's last word is the cast's error. The race CI hit, made certain: the piece
    is taken in just before the worker gives the cast up, and its answer comes while the
    error is still going out over a slow socket; it must not follow the error."""
    held = HeldPiece(store)
    async with serve(held, engine=FailsOnText()) as live:
        inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return await inbox.get()

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)
            if '"type":"error"' in message.get("text", ""):
                held.answer.set()  # the piece's answer now waits behind the error
                await asyncio.sleep(0.3)  # a slow socket

        scope = {
            "type": "websocket",
            "asgi": {"version": "3.0"},
            "path": "/v1/audio/speech/live",
            "raw_path": b"/v1/audio/speech/live",
            "root_path": "",
            "scheme": "ws",
            "query_string": b"",
            "headers": [(b"host", b"127.0.0.1")],
            "client": ("127.0.0.1", 40000),
            "server": ("127.0.0.1", live.port),
            "subprotocols": [],
        }
        await inbox.put({"type": "websocket.connect"})
        await inbox.put({"type": "websocket.receive", "text": '{"voice": "af_heart"}'})
        await inbox.put(
            {"type": "websocket.receive", "text": '{"type": "input.append", "text": "Hi. "}'}
        )
        session = asyncio.ensure_future(live.app(scope, receive, send))
        try:
            await asyncio.wait_for(asyncio.shield(session), 30)
        finally:
            await inbox.put({"type": "websocket.disconnect", "code": 1000})
            await asyncio.wait_for(session, 30)
    assert held.taken.is_set() and held.answer.is_set()
    kinds = [m["type"] for m in sent]
    assert kinds[0] == "websocket.accept" and kinds[-1] == "websocket.close", kinds
    words = [json.loads(m["text"])["type"] for m in sent[1:-1]]
    assert words == ["cast", "error"], words
    assert sent[-1]["code"] == 1011
