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

from speechd.casts.schema import InputEnd, input_event, input_stream
from speechd.durable import EmbeddedStore, Store
from tests.live._support import serve
from tests.support.engines import CostEngine, FakeChunkPolicy
from tests.support.streams import read_stream


class Unplannable(CostEngine):
    """The cost model, whose planner cannot open a cast's plan: the worker gives the cast up
    as it starts it, before any text came."""

    def planner(self, voice: str, policy: FakeChunkPolicy, **options: Any) -> Any:
        raise ValueError("the planner is out of order")


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
