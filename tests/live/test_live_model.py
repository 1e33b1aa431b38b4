"""A live cast end to end on the real Kokoro-82M: a simulated LLM streams a reply over HTTP,
pausing mid-sentence; the worker plans it with the real incremental planner as it arrives, and
the cast is one valid mp3 whose captions are the text that was sent."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from speechd.durable import EmbeddedStore, Store
from speechd.engine import EngineConfig, load_engine
from speechd.text import ChunkPolicy
from speechd.text._slices import normalize_text
from tests.live._support import SimulatedLlm, playable, serve, wait_done

pytestmark = pytest.mark.model

REPLY = (
    "Owls hunt mostly by ear, and some can catch prey they cannot see. Their faces funnel "
    "sound toward ears set at different heights, so they hear up from down."
)


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    opened = await EmbeddedStore.open(tmp_path / "data")
    yield opened
    await opened.close()


@pytest.fixture(scope="module")
def engine(model_dir: Path) -> Any:
    return load_engine(EngineConfig(model_dir=str(model_dir), device="cpu"))


async def test_a_streamed_reply_becomes_one_valid_mp3_of_its_text(
    store: Store, engine: Any
) -> None:
    llm = SimulatedLlm(REPLY, rate=15.0)
    llm.pauses = {llm.mid_sentence()[3]: 1.2}  # past the planner's flush time
    async with (
        serve(store, engine=engine, chunk_policy=ChunkPolicy()) as live,
        httpx.AsyncClient(base_url=live.url, timeout=120) as http,
    ):
        made = await http.post(
            "/v1/casts", json={"live": True, "voice": "af_heart", "response_format": "mp3"}
        )
        cast = made.json()
        auth = {"authorization": f"Bearer {cast['input_token']}"}
        async for token in llm.stream():
            sent = await http.post(cast["input_url"], json={"text": token}, headers=auth)
            assert sent.status_code == 200, sent.text
        await http.post(cast["input_url"], json={"done": True}, headers=auth)
        await wait_done(store, cast["id"], within_s=600)
        chunks = await playable(store, cast["id"])
        audio = (await http.get(f"/v1/casts/{cast['id']}/audio")).content
    assert audio == b"".join(c.body for c in chunks)
    captions = " ".join(c.text for c in chunks if c.text)
    assert captions.split() == normalize_text(REPLY).split()
    result = await asyncio.to_thread(
        subprocess.run,
        ["ffmpeg", "-v", "error", "-xerror", "-i", "pipe:0", "-f", "null", "-"],
        input=audio,
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0 and not result.stderr, result.stderr
