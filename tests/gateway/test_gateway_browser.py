"""The player and the paste page in headless Chromium (the system's, never a download).

The page exposes `window.speechd.snapshot()`: its state, the audio clock (cast time, from the
AudioContext), the caption playing, and what it has received. Each test polls it while the
cast is written into the store as a worker would."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from gateway_support import CastWriter, LiveServer, new_cast
from playwright.async_api import Browser, Page, async_playwright

from speechd.audio import FORMATS, LAYOUTS
from speechd.durable import Store

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=ARGS
        )
        try:
            yield browser
        finally:
            await browser.close()


class Player:
    """A player page and the snapshots taken of it."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.snapshots: list[dict[str, Any]] = []
        self.errors: list[str] = []
        page.on("pageerror", lambda error: self.errors.append(str(error)))

    async def snap(self) -> dict[str, Any]:
        snapshot: dict[str, Any] = await self.page.evaluate("window.speechd.snapshot()")
        self.snapshots.append(snapshot)
        return snapshot

    async def watch(self, seconds: float) -> None:
        """Take snapshots for `seconds`."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            await self.snap()
            await asyncio.sleep(0.05)

    async def wait_for(self, what: str, check: Any, within_s: float = 15.0) -> dict[str, Any]:
        deadline = time.monotonic() + within_s
        while True:
            snapshot = await self.snap()
            if check(snapshot):
                return snapshot
            if time.monotonic() > deadline:
                raise AssertionError(f"player never got {what}; last: {snapshot}")
            await asyncio.sleep(0.05)


async def open_player(browser: Browser, server: LiveServer, cast_id: str) -> Player:
    page = await browser.new_page()
    player = Player(page)
    await page.goto(f"{server.url}/c/{cast_id}")
    await page.wait_for_function("window.speechd !== undefined")
    return player


def assert_played_in_order(player: Player, chunks: int, duration: float) -> None:
    clocks = [s["clock"] for s in player.snapshots]
    assert all(b >= a - 1e-6 for a, b in itertools.pairwise(clocks)), clocks
    assert clocks[-1] == pytest.approx(duration, abs=0.02)
    captions = [s["caption"] for s in player.snapshots if s["caption"] >= 0]
    assert sorted(set(captions)) == list(range(chunks))
    assert captions == sorted(captions)  # the captions advanced with the clock
    audio_times = [s["audioTime"] for s in player.snapshots]
    assert audio_times[-1] - audio_times[0] >= duration * 0.9  # the audio clock really ran


async def test_player_follows_a_live_cast_to_the_end(
    store: Store, server: LiveServer, browser: Browser
) -> None:
    texts = [f"Sentence number {i} of the live cast." for i in range(6)]
    cast = await new_cast(store, texts, fmt="wav", title="A live cast")
    await cast.start()
    await cast.chunk(0.6)
    player = await open_player(browser, server, cast.id)
    await player.wait_for("playing", lambda s: s["state"] == "playing")
    for _ in texts[1:]:  # faster than real time, like a GPU
        await player.watch(0.3)
        await cast.chunk(0.6)
    ARTIFACTS.mkdir(exist_ok=True)
    await player.page.screenshot(path=str(ARTIFACTS / "player-live.png"), full_page=True)
    await cast.eos()
    end = await player.wait_for("the end", lambda s: s["state"] == "ended")
    assert end["complete"]
    assert end["captions"] == texts
    assert_played_in_order(player, 6, 3.6)
    assert await player.page.text_content("#now") == texts[-1]
    assert player.errors == []


async def test_player_waits_at_the_live_edge_of_a_slow_cast(
    store: Store, server: LiveServer, browser: Browser
) -> None:
    texts = [f"Slow part {i}." for i in range(4)]
    cast = await new_cast(store, texts, fmt="pcm")
    player = await open_player(browser, server, cast.id)
    await player.wait_for("queued", lambda s: s["state"] == "queued")
    await cast.start()
    for _ in texts:  # slower than real time, like a small CPU: the listener catches up
        await cast.chunk(0.4)
        await player.watch(0.7)
    await cast.eos()
    await player.wait_for("the end", lambda s: s["state"] == "ended")
    states = {s["state"] for s in player.snapshots}
    assert {"queued", "playing", "buffering", "ended"} <= states
    assert_played_in_order(player, 4, 1.6)
    assert player.errors == []


# Decodes the whole audio file in the page and compares it with the player's timeline.
COMPARE_JS = """async ({url, delay, rate}) => {
  const bytes = await (await fetch(url)).arrayBuffer();
  const whole = await new OfflineAudioContext(1, 1, rate).decodeAudioData(bytes);
  const pcm = whole.getChannelData(0).subarray(delay);
  const timeline = window.speechd.timelinePcm();
  let maxDiff = 0;
  const n = Math.min(pcm.length, timeline.length);
  for (let i = 0; i < n; i++) maxDiff = Math.max(maxDiff, Math.abs(pcm[i] - timeline[i]));
  return {whole: pcm.length, timeline: timeline.length, maxDiff};
}"""


@pytest.mark.parametrize("fmt", FORMATS)
async def test_player_timeline_is_the_whole_file_decoded(
    store: Store, server: LiveServer, browser: Browser, fmt: str
) -> None:
    """Records decoded one by one as they arrive give the samples of decoding the whole file
    (speechd.audio's per-record contract): no gaps, repeats or clicks at chunk boundaries."""
    layout = LAYOUTS[fmt]
    texts = [f"Chunk {i}." for i in range(5)]
    cast = await new_cast(store, texts, fmt=fmt)
    await cast.start()
    player = await open_player(browser, server, cast.id)
    for seconds in (0.31, 0.5, 0.27, 0.64, 0.4):
        await cast.chunk(seconds)
        await asyncio.sleep(0.05)
    await cast.eos()
    end = await player.wait_for("the end", lambda s: s["state"] == "ended")
    assert end["duration"] == pytest.approx(2.12, abs=1e-3)
    assert end["captions"] == texts
    assert player.errors == []
    if fmt == "pcm":
        return  # no file a browser decodes; its samples are read directly
    rate = layout.decode_rate
    result = await player.page.evaluate(
        COMPARE_JS,
        {"url": f"/v1/casts/{cast.id}/audio", "delay": layout.delay_samples, "rate": rate},
    )
    assert result["timeline"] == round(2.12 * rate)
    assert result["whole"] >= result["timeline"]  # the whole decode may add codec padding
    # wav: the player reads s16 as Int16 / 32768, Chromium scales positive samples by
    # 1 / 32767 (under 1e-4 apart). opus is approximate by design (speechd.audio: ~1e-3).
    tolerance = 1e-4 if fmt == "wav" else 0.0 if layout.exact else 2e-3
    assert result["maxDiff"] <= tolerance


async def test_player_replays_a_done_cast_and_seeks_by_caption(
    store: Store, server: LiveServer, browser: Browser
) -> None:
    texts = [f"Part {i}." for i in range(5)]
    cast = await new_cast(store, texts, fmt="wav")
    await cast.run(1.0)
    player = await open_player(browser, server, cast.id)
    await player.wait_for("playing", lambda s: s["state"] == "playing" and s["clock"] > 0.2)
    await player.page.get_by_role("button", name="Part 3.").click()
    jumped = await player.wait_for("the seek", lambda s: s["clock"] >= 3.0)
    assert jumped["caption"] == 3
    assert jumped["clock"] < 4.0
    assert await player.page.get_attribute("#captions li:nth-child(4)", "class") == "current"
    await player.page.get_by_role("button", name="Part 1.").click()
    back = await player.wait_for("the seek back", lambda s: s["clock"] < 2.0)
    assert back["caption"] == 1
    end = await player.wait_for("the end", lambda s: s["state"] == "ended")
    assert end["clock"] == pytest.approx(5.0, abs=0.02)
    assert end["restarts"] == 0
    assert player.errors == []


async def test_player_restarts_cleanly_at_a_newer_attempt(
    store: Store, server: LiveServer, browser: Browser
) -> None:
    cast = await new_cast(store, ["Old A.", "Old B.", "Old C."], fmt="wav")
    await cast.start()
    await cast.chunk(0.5)
    player = await open_player(browser, server, cast.id)
    await player.wait_for("playing", lambda s: s["state"] == "playing")
    await cast.chunk(0.5)
    await player.wait_for("two chunks", lambda s: s["chunks"] == 2)
    # The worker died; another one starts over (attempt 2, a different plan).
    cast.texts = ["New one.", "New two.", "New three.", "New four."]
    await cast.start()
    restarted = await player.wait_for("the restart", lambda s: s["restarts"] == 1)
    assert restarted["attempt"] == 2
    for _ in cast.texts:
        await cast.chunk(0.4)
        await asyncio.sleep(0.1)
    await cast.eos()
    end = await player.wait_for("the end", lambda s: s["state"] == "ended")
    assert end["captions"] == cast.texts
    assert end["duration"] == pytest.approx(1.6, abs=0.01)
    assert end["clock"] == pytest.approx(1.6, abs=0.02)
    assert len(await player.page.query_selector_all("#captions li")) == 4
    assert player.errors == []


async def test_player_skips_abandoned_attempts_of_a_done_cast(
    store: Store, server: LiveServer, browser: Browser
) -> None:
    cast = await new_cast(store, ["First.", "Second."], fmt="pcm")
    await cast.start()
    await cast.chunk(0.3)
    await cast.run(0.3)
    player = await open_player(browser, server, cast.id)
    end = await player.wait_for("the end", lambda s: s["state"] == "ended")
    assert end["restarts"] == 0
    assert end["attempt"] == 2
    assert end["captions"] == ["First.", "Second."]


async def test_player_shows_a_failure_plainly(
    store: Store, server: LiveServer, browser: Browser
) -> None:
    cast = await new_cast(store, ["Doomed.", "Never."], fmt="wav")
    await cast.start()
    await cast.chunk(0.3)
    player = await open_player(browser, server, cast.id)
    await player.wait_for("a chunk", lambda s: s["chunks"] == 1)
    await cast.error("the GPU ran out of memory")
    failed = await player.wait_for("the failure", lambda s: s["state"] == "failed")
    assert "the GPU ran out of memory" in failed["error"]
    assert await player.page.is_visible("#failure")
    assert "the GPU ran out of memory" in (await player.page.text_content("#failure") or "")
    assert player.errors == []


async def test_player_of_a_cast_that_does_not_exist(
    store: Store, server: LiveServer, browser: Browser
) -> None:
    page = await browser.new_page()
    response = await page.goto(f"{server.url}/c/AAAAAAAAAAAAAAAAAAAAAA")
    assert response is not None and response.status == 404
    assert await page.text_content("h1") == "No such cast"


async def test_paste_page_submits_and_lands_on_the_player(
    store: Store, server: LiveServer, browser: Browser
) -> None:
    page = await browser.new_page()
    await page.goto(server.url + "/")
    await page.wait_for_selector("#voice option[value='bf_emma']", state="attached")
    await page.fill("#text", "Hello from the paste page. It has two sentences.")
    await page.select_option("#voice", "bf_emma")
    await page.select_option("#format", "wav")
    await page.click("#submit")
    await page.wait_for_url(f"{server.url}/c/*")
    cast_id = page.url.rsplit("/", 1)[1]
    assert await page.text_content("h1") == "Hello from the paste page."
    player = Player(page)
    await page.wait_for_function("window.speechd !== undefined")
    await player.wait_for("queued", lambda s: s["state"] == "queued")
    # The worker's part, and the page plays it.
    cast = CastWriter(store, cast_id, "wav", ["Hello from the paste page.", "It has two."])
    await cast.run(0.3)
    await player.wait_for("the end", lambda s: s["state"] == "ended")
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / "player-done.png"), full_page=True)
    assert player.errors == []


async def test_paste_page_shows_errors(store: Store, server: LiveServer, browser: Browser) -> None:
    page = await browser.new_page()
    await page.goto(server.url + "/")
    await page.fill("#text", "   ")
    await page.click("#submit")
    await page.wait_for_selector("#form-error:not([hidden])")
    assert "input" in (await page.text_content("#form-error") or "")
    assert page.url == server.url + "/"
