"""The player page follows a live cast like any other: the text arrives while it plays, the
player waits at the live edge, says it is live, and plays every part to the end."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from speechd.durable import EmbeddedStore, Store
from tests.support.browser import launch_browser, open_player
from tests.support.live import SimulatedLlm, playable, serve, wait_done

pytestmark = pytest.mark.browser


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    opened = await EmbeddedStore.open(tmp_path / "data")
    yield opened
    await opened.close()


async def test_the_player_follows_a_live_cast_to_the_end(store: Store) -> None:
    llm = SimulatedLlm(rate=20.0)
    llm.pauses = {llm.mid_sentence()[2]: 2.0}  # the listener catches up and waits
    async with (
        serve(store) as live,
        httpx.AsyncClient(base_url=live.url) as http,
        launch_browser() as browser,
    ):
        made = await http.post(
            "/v1/casts",
            json={"live": True, "voice": "af_heart", "response_format": "wav", "input": "So,"},
        )
        cast = made.json()
        auth = {"authorization": f"Bearer {cast['input_token']}"}
        player = await open_player(browser, live.url, cast["id"])
        statuses: set[str] = set()

        async def feed() -> None:
            async for token in llm.stream():
                await http.post(cast["input_url"], json={"text": token}, headers=auth)
            await http.post(cast["input_url"], json={"done": True}, headers=auth)

        feeding = asyncio.create_task(feed())
        while not feeding.done():
            await player.snap()
            statuses.add(await player.page.text_content("#status") or "")
            await asyncio.sleep(0.05)
        await feeding
        end = await player.wait_for("the end", lambda s: s["state"] == "ended", within_s=60)
        await wait_done(store, cast["id"])
        texts = [c.text for c in await playable(store, cast["id"]) if c.text]
    assert end["complete"] and [t for t in end["captions"] if t] == texts
    assert any(s.startswith("Live") for s in statuses), statuses
    assert player.errors == []
