"""End to end on the real thing: `speechd serve` with the Kokoro-82M weights on the CPU, a cast
submitted with `POST /v1/casts`, its player played to the end in headless Chromium, and its
audio file served whole, with validators and byte ranges."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Browser

from harness.servers import LiveServer, start_server
from tests.api.test_serve import decoded_seconds
from tests.support.browser import ARTIFACTS, open_player
from tests.support.devices import DEVICE

pytestmark = [pytest.mark.model, pytest.mark.browser, pytest.mark.slow]

TEXT = "The quick brown fox jumps over the lazy dog.\nThen it naps in the afternoon sun."


@pytest.fixture(scope="module")
def served(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data = tmp_path_factory.mktemp("gateway-serve") / "data"
    args = ["serve", "--data-dir", str(data), "--model-dir", str(model_dir), "--device", DEVICE]
    with start_server(args, timeout=240) as server:
        yield server


async def test_a_cast_plays_in_the_browser_and_downloads_whole(
    served: LiveServer, browser: Browser
) -> None:
    async with httpx.AsyncClient(base_url=served.url, timeout=120) as http:
        created = await http.post("/v1/casts", json={"input": TEXT, "voice": "af_heart"})
        assert created.status_code == 201, created.text
        cast_id = created.json()["id"]
        assert created.json()["url"] == f"{served.url}/c/{cast_id}"

        player = await open_player(browser, served.url, cast_id)
        end = await player.wait_for("the end", lambda s: s["state"] == "ended", within_s=300)
        ARTIFACTS.mkdir(exist_ok=True)
        await player.page.screenshot(path=str(ARTIFACTS / "player-kokoro.png"), full_page=True)
        assert end["complete"]
        assert player.errors == []
        spoken = " ".join(end["captions"]).split()
        assert spoken == TEXT.split()  # every word captioned once, in order
        assert 3 < end["duration"] < 15
        assert end["clock"] == pytest.approx(end["duration"], abs=0.05)
        audio_times = [s["audioTime"] for s in player.snapshots]
        assert audio_times[-1] - audio_times[0] >= end["duration"] * 0.9

        view = (await http.get(f"/v1/casts/{cast_id}")).json()
        assert view["status"] == "done"
        assert view["title"] == "The quick brown fox jumps over the lazy dog."
        assert view["progress"]["audio_seconds"] == pytest.approx(end["duration"], abs=0.05)

        url = f"/v1/casts/{cast_id}/audio"
        whole = await http.get(url)
        assert whole.status_code == 200
        assert whole.headers["content-type"] == "audio/mpeg"
        assert whole.headers["content-length"] == str(len(whole.content))
        assert whole.headers["accept-ranges"] == "bytes"
        assert decoded_seconds(whole.content) == pytest.approx(end["duration"], abs=0.1)
        etag = whole.headers["etag"]
        cached = await http.get(url, headers={"if-none-match": etag})
        assert cached.status_code == 304
        size = len(whole.content)
        piece = await http.get(url, headers={"range": "bytes=100-1099", "if-range": etag})
        assert piece.status_code == 206
        assert piece.headers["content-range"] == f"bytes 100-1099/{size}"
        assert piece.content == whole.content[100:1100]
        tail = await http.get(url, headers={"range": "bytes=-10"})
        assert tail.content == whole.content[-10:]
