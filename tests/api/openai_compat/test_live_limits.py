"""Live casts within the api's limits (issue 14): a WebSocket session holds one of the client's
stream slots, a store failure writing the input is a 503 `store_unavailable` (an error message
on the socket, which goes on) with one log line naming no cast, and the manual's list of
limits has the live routes' as the code has them."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from harness.forwarding import ForwardingStore
from speechd.api import MAX_WS_MESSAGE_BYTES
from speechd.api.openai_compat._live_wire import MAX_INPUT_BODY_BYTES
from speechd.config import Settings
from speechd.durable import (
    AppendAck,
    AppendRecord,
    DurableError,
    EmbeddedStore,
    Store,
)
from speechd.service import _requests as live_limits
from tests.support.live import LiveApp, serve, wait_done


class InputTrouble(ForwardingStore):
    """A store whose appends to live inputs fail while `broken` (as a real backend's errors
    do, naming the stream); everything else, the worker's appends included, goes through."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.broken = False

    async def append(
        self, stream: str, records: Sequence[AppendRecord], *, match_seq_num: int | None = None
    ) -> AppendAck:
        if self.broken and stream.startswith("input/"):
            raise DurableError(f"appending to {stream} failed: the disk went away")
        return await self.inner.append(stream, records, match_seq_num=match_seq_num)

    async def close(self) -> None:
        pass  # the test owns the inner store


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    opened = await EmbeddedStore.open(tmp_path / "data")
    yield opened
    await opened.close()


async def _start(live: LiveApp, **first: Any) -> tuple[Any, dict[str, Any]]:
    ws = await websockets.connect(live.ws)
    await ws.send(json.dumps({"voice": "af_heart", "response_format": "pcm", **first}))
    return ws, json.loads(await ws.recv())


async def _closed(ws: Any) -> int | None:
    with pytest.raises(websockets.ConnectionClosed):
        while True:
            await ws.recv()
    return ws.close_code


async def test_a_websocket_session_holds_a_stream_slot_of_its_client(store: Store) -> None:
    settings = Settings(data_dir="unused", max_client_streams=1)
    async with (
        serve(store, settings=settings) as live,
        httpx.AsyncClient(base_url=live.url) as http,
    ):
        first, cast = await _start(live, input="Hello there, ")
        assert cast["type"] == "cast"
        # The client's one slot is the session's: another session, or a speech request that
        # waits for its audio, is refused before anything is made.
        async with websockets.connect(live.ws) as second:  # refused before its first message
            refused = json.loads(await second.recv())
            assert refused["type"] == "error"
            assert refused["error"]["code"] == "too_many_streams"
            assert await _closed(second) == 1013
        speech = await http.post("/v1/audio/speech", json={"input": "Hi.", "voice": "af_heart"})
        assert speech.status_code == 429 and speech.headers["retry-after"] == "5"
        await first.send(json.dumps({"type": "input.done", "text": "friend."}))
        assert await _closed(first) == 1000
        await wait_done(store, cast["id"])
        # The session ended: its slot is given back (a failsafe wait, not a timing).
        deadline = time.monotonic() + 30
        while True:
            again = await websockets.connect(live.ws)
            with contextlib.suppress(websockets.ConnectionClosed):
                await again.send(json.dumps({"voice": "af_heart", "input": "Again."}))
                if json.loads(await again.recv())["type"] == "cast":
                    break
            assert await _closed(again) == 1013 and time.monotonic() < deadline
        await again.send(json.dumps({"type": "input.done"}))
        assert await _closed(again) == 1000


async def test_store_trouble_writing_the_input_is_a_503_and_one_line(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    flaky = InputTrouble(store)
    async with serve(flaky) as live, httpx.AsyncClient(base_url=live.url) as http:
        made = await http.post("/v1/casts", json={"live": True, "voice": "af_heart"})
        cast = made.json()
        auth = {"authorization": f"Bearer {cast['input_token']}"}
        flaky.broken = True
        with caplog.at_level(logging.INFO, logger="speechd"):
            caplog.clear()
            piece = {"text": "Hello.", "seq": 0}
            sent = await http.post(cast["input_url"], json=piece, headers=auth)
            records = [r for r in caplog.records if r.name.startswith("speechd")]
        assert sent.status_code == 503 and sent.headers["retry-after"] == "1"
        assert sent.json()["error"]["code"] == "store_unavailable"
        trouble = [r for r in records if "store unavailable" in r.getMessage()]
        assert len(trouble) == 1
        for record in records:
            assert record.exc_info is None and cast["id"] not in record.getMessage()
        # The store is back: the same piece again, with the same seq, is taken once.
        flaky.broken = False
        again = {"text": "Hello.", "seq": 0, "done": True}
        assert (await http.post(cast["input_url"], json=again, headers=auth)).status_code == 200
        await wait_done(store, cast["id"])


async def test_store_trouble_on_the_socket_is_an_error_and_the_session_goes_on(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    flaky = InputTrouble(store)
    async with serve(flaky) as live:
        ws, cast = await _start(live)
        assert cast["type"] == "cast"
        flaky.broken = True
        with caplog.at_level(logging.INFO, logger="speechd"):
            caplog.clear()
            await ws.send(json.dumps({"type": "input.append", "text": "Hello.", "seq": 0}))
            event = json.loads(await ws.recv())
            records = [r for r in caplog.records if r.name.startswith("speechd")]
        assert event["type"] == "error" and event["error"]["code"] == "store_unavailable"
        assert [r.exc_info for r in records if "store unavailable" in r.getMessage()] == [None]
        assert all(cast["id"] not in r.getMessage() for r in records)
        flaky.broken = False
        await ws.send(json.dumps({"type": "input.done", "text": "Hello.", "seq": 0}))
        kinds = []
        async for message in ws:
            if isinstance(message, str):
                kinds.append(json.loads(message)["type"])
        assert kinds[0] == "input.accepted" and kinds[-1] == "speech.audio.done"
        assert ws.close_code == 1000


def test_the_manual_lists_the_live_limits_as_the_code_has_them() -> None:
    section = (Path(__file__).resolve().parents[3] / "docs/operations/limits.md").read_text()
    limits = {
        "MAX_PIECE_CHARS": live_limits.MAX_PIECE_CHARS,
        "MAX_LIVE_CHARS": live_limits.MAX_LIVE_CHARS,
        "MAX_PIECES": live_limits.MAX_PIECES,
        "MAX_TOKEN_CHARS": live_limits.MAX_TOKEN_CHARS,
        "MAX_INPUT_BODY_BYTES": MAX_INPUT_BODY_BYTES,
        "MAX_WS_MESSAGE_BYTES": MAX_WS_MESSAGE_BYTES,
    }
    for name, value in limits.items():
        assert f"`{name}` = {value:,}" in section, f"{name} = {value:,} is not in the manual"
    assert "--live-idle-timeout" in section
