"""SIGTERM to `speechd api` while listeners follow a cast that is still generating: their
streams end at once (SSE with `abort`, live audio incomplete, long-polls empty) and the
server exits 0, instead of waiting up to `--shutdown-timeout` for the cast to finish."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from harness.servers import start_server
from speechd.durable import EmbeddedStore
from tests.api.gateway._support import (
    StepEngine,
    running_worker,
    sse_events,
    status_when,
    submit,
    until,
)

pytestmark = pytest.mark.slow


async def test_sigterm_ends_the_followers_and_exits_promptly(tmp_path: Path) -> None:
    data = tmp_path / "data"
    store = await EmbeddedStore.open(data)
    engine = StepEngine()
    engine.hold()
    try:
        async with running_worker(store, engine):
            with contextlib.ExitStack() as stack:
                # The server is its own process on the same store; this loop runs the worker,
                # so wait for the server's start in a thread.
                args = ["api", "--data-dir", str(data), "--shutdown-timeout", "600"]
                server = await asyncio.to_thread(stack.enter_context, start_server(args))
                async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
                    cast_id = await submit(http, "One two. Three four five six.")
                    engine.allow(1)
                    await status_when(store, cast_id, lambda s: s.chunks_done == 1)
                    raw: list[str] = []
                    received = bytearray()

                    async def follow() -> None:
                        async with http.stream("GET", f"/v1/casts/{cast_id}/events") as sse:
                            async for text in sse.aiter_text():
                                raw.append(text)

                    async def listen() -> None:
                        async with http.stream("GET", f"/v1/casts/{cast_id}/audio") as audio:
                            async for chunk in audio.aiter_bytes():
                                received.extend(chunk)

                    sse = asyncio.create_task(follow())
                    audio = asyncio.create_task(listen())
                    poll = asyncio.create_task(
                        http.get(f"/v1/casts/{cast_id}/records?seq_num=3&wait=600")
                    )
                    await until(lambda: "event: audio" in "".join(raw) and len(received) > 0)
                    assert not poll.done()

                    server.process.send_signal(signal.SIGTERM)
                    # Without closing the streams first, uvicorn would wait 600 s on them.
                    code = await asyncio.to_thread(server.process.wait, 60)
                    assert code == 0, server.log()
                    await asyncio.wait_for(sse, 10)
                    with pytest.raises(httpx.RemoteProtocolError):
                        await asyncio.wait_for(audio, 10)
                    page = await asyncio.wait_for(poll, 10)
        events = sse_events("".join(raw))
        assert events[-1]["event"] == "abort"
        assert json.loads(events[-1]["data"])["reason"] == "shutting_down"
        assert page.json() == {"records": [], "tail": 3}
    except subprocess.TimeoutExpired:
        pytest.fail("speechd did not exit on SIGTERM while listeners followed a live cast")
    finally:
        await store.close()
