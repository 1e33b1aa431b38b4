"""The player and the paste page in headless Chromium, on casts the real worker makes (the
cost-model engine, held to the test's pace, and speechd.audio's encoders). Each test polls
the page's snapshots while the worker publishes chunks."""

from __future__ import annotations

import asyncio
import itertools

import httpx
import pytest
from playwright.async_api import Browser

from speechd.audio import FORMATS, LAYOUTS, new_encoder
from speechd.casts import CastState
from speechd.durable import Store
from tests.api.gateway._support import (
    LiveServer,
    StepEngine,
    chunk_texts,
    running_worker,
    serve,
    status_when,
    submit,
)
from tests.support.browser import ARTIFACTS, Player, open_player
from tests.support.chromium import CHROMIUM_STEP

pytestmark = pytest.mark.browser


def words(count: int, stem: str = "word") -> str:
    """A text of `count` distinct words: its chunks (2, 4, 8, 16, 16... words) differ."""
    return " ".join(f"{stem}{i}" for i in range(count))


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
    engine: StepEngine, server: LiveServer, http: httpx.AsyncClient, browser: Browser
) -> None:
    text = words(2 + 4 + 8 + 16 + 16 + 16, "live")
    texts = chunk_texts(text)
    engine.hold()
    cast_id = await submit(http, text, response_format="wav", title="A live cast")
    engine.allow(1)
    player = await open_player(browser, server.url, cast_id)
    await player.wait_for("playing", lambda s: s["state"] == "playing")
    for _ in texts[1:]:  # faster than real time, like a GPU
        await player.watch(0.3)
        engine.allow(1)
    ARTIFACTS.mkdir(exist_ok=True)
    await player.page.screenshot(path=str(ARTIFACTS / "player-live.png"), full_page=True)
    end = await player.wait_for("the end", lambda s: s["state"] == "ended")
    assert end["complete"]
    assert end["captions"] == texts
    assert_played_in_order(player, len(texts), sum(engine.durations(text)))
    assert await player.page.text_content("#now") == texts[-1]
    assert player.errors == []


async def test_player_waits_in_line_and_at_the_live_edge_of_a_slow_cast(
    store: Store,
    engine: StepEngine,
    server: LiveServer,
    http: httpx.AsyncClient,
    browser: Browser,
) -> None:
    engine.hold()
    ahead = await submit(http, "First come.")  # the worker takes one cast at a time
    text = words(2 + 4 + 8 + 16, "slow")
    cast_id = await submit(http, text, response_format="pcm")
    player = await open_player(browser, server.url, cast_id)
    await player.wait_for("queued", lambda s: s["state"] == "queued")
    engine.allow(1)
    await status_when(store, ahead, lambda s: s.state == CastState.DONE)
    for _ in chunk_texts(text):  # slower than real time, like a small CPU: the listener waits
        engine.allow(1)
        await player.watch(1.0)
    await player.wait_for("the end", lambda s: s["state"] == "ended")
    states = {s["state"] for s in player.snapshots}
    assert {"queued", "playing", "buffering", "ended"} <= states
    assert_played_in_order(player, 4, sum(engine.durations(text)))
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
    engine: StepEngine, server: LiveServer, http: httpx.AsyncClient, browser: Browser, fmt: str
) -> None:
    """Records decoded one by one as they arrive give the samples of decoding the whole file
    (speechd.audio's per-record contract): no gaps, repeats or clicks at chunk boundaries."""
    layout = LAYOUTS[fmt]
    text = words(2 + 4 + 8 + 16 + 5, "chunk")
    texts = chunk_texts(text)
    duration = sum(engine.durations(text))
    engine.hold()
    cast_id = await submit(http, text, response_format=fmt)
    player = await open_player(browser, server.url, cast_id)
    for _ in texts:
        engine.allow(1)
        await player.watch(0.05)
    end = await player.wait_for("the end", lambda s: s["state"] == "ended")
    assert end["duration"] == pytest.approx(duration, abs=1e-3)
    assert end["captions"] == texts
    assert player.errors == []
    if fmt == "pcm":
        return  # no file a browser decodes; its samples are read directly
    rate = layout.decode_rate
    result = await player.page.evaluate(
        COMPARE_JS,
        {"url": f"/v1/casts/{cast_id}/audio", "delay": layout.delay_samples, "rate": rate},
    )
    assert abs(result["timeline"] - duration * rate) <= 1
    assert result["whole"] >= result["timeline"]  # the whole decode may add codec padding
    # wav: the player reads s16 as Int16 / 32768, Chromium scales positive samples by
    # 1 / 32767 (under 1e-4 apart). opus is approximate by design (speechd.audio: ~1e-3).
    tolerance = 1e-4 if fmt == "wav" else CHROMIUM_STEP.get(fmt, 0.0) if layout.exact else 2e-3
    assert result["maxDiff"] <= tolerance


async def test_player_replays_a_done_cast_and_seeks_by_caption(
    store: Store,
    engine: StepEngine,
    server: LiveServer,
    http: httpx.AsyncClient,
    browser: Browser,
) -> None:
    engine.audio_per_char = 0.05  # chunks of 0.6 to 5 s
    text = words(2 + 4 + 8 + 16 + 4, "part")
    texts = chunk_texts(text)
    starts = list(itertools.accumulate(engine.durations(text), initial=0.0))
    cast_id = await submit(http, text, response_format="wav")
    await status_when(store, cast_id, lambda s: s.state == CastState.DONE)
    player = await open_player(browser, server.url, cast_id)
    await player.wait_for("playing", lambda s: s["state"] == "playing" and s["clock"] > 0.2)
    await player.page.get_by_role("button", name=texts[3], exact=True).click()
    jumped = await player.wait_for("the seek", lambda s: s["clock"] >= starts[3])
    assert jumped["caption"] == 3
    assert jumped["clock"] < starts[4]
    assert await player.page.get_attribute("#captions li:nth-child(4)", "class") == "current"
    await player.page.get_by_role("button", name=texts[1], exact=True).click()
    back = await player.wait_for("the seek back", lambda s: s["clock"] < starts[2])
    assert back["caption"] == 1
    await player.page.get_by_role("button", name=texts[4], exact=True).click()
    end = await player.wait_for("the end", lambda s: s["state"] == "ended")
    assert end["clock"] == pytest.approx(starts[-1], abs=0.02)
    assert end["restarts"] == 0
    assert player.errors == []


async def test_player_follows_a_newer_attempt_seamlessly(
    engine: StepEngine, server: LiveServer, http: httpx.AsyncClient, browser: Browser
) -> None:
    # The third chunk fails once: the worker opens attempt 2, which keeps the first two.
    text = "One two. Three four five six. FLAKY eight nine ten eleven twelve thirteen fourteen."
    texts = chunk_texts(text)
    engine.hold()
    cast_id = await submit(http, text, response_format="wav")
    engine.allow(1)
    player = await open_player(browser, server.url, cast_id)
    await player.wait_for("a chunk", lambda s: s["chunks"] == 1)
    engine.allow(1)
    await player.wait_for("two chunks", lambda s: s["chunks"] == 2)
    engine.allow(1)  # the third chunk fails
    await player.wait_for("the new attempt", lambda s: s["attempt"] == 2)
    engine.run_free()
    end = await player.wait_for("the end", lambda s: s["state"] == "ended")
    assert end["restarts"] == 0  # it kept its place: nothing played twice
    assert end["captions"] == texts
    duration = sum(engine.durations(text))
    assert end["duration"] == pytest.approx(duration, abs=0.01)
    assert end["clock"] == pytest.approx(duration, abs=0.02)
    assert len(await player.page.query_selector_all("#captions li")) == 3
    assert player.errors == []


@pytest.mark.parametrize("fmt", FORMATS)
async def test_player_timeline_of_a_cast_another_worker_resumed(
    store: Store, browser: Browser, fmt: str
) -> None:
    """A worker stops mid-cast and another resumes it from the last record's checkpoint (a
    fresh codec for mp3, aac and opus): the player follows across the splice without starting
    over, and its timeline is still the whole file decoded."""
    layout = LAYOUTS[fmt]
    text = words(2 + 4 + 8 + 16 + 16 + 5, "splice")
    texts = chunk_texts(text)
    first = StepEngine()
    first.hold()
    async with serve(store) as live, httpx.AsyncClient(base_url=live.url, timeout=30) as http:
        async with running_worker(store, first):
            cast_id = await submit_when_ready(http, text, response_format=fmt)
            player = await open_player(browser, live.url, cast_id)
            first.allow(3)
            await player.wait_for("three chunks", lambda s: s["chunks"] == 3)
        second = StepEngine()
        async with running_worker(store, second):
            end = await player.wait_for("the end", lambda s: s["state"] == "ended")
        rate = layout.decode_rate
        url = f"/v1/casts/{cast_id}/audio"
        compare = {"url": url, "delay": layout.delay_samples, "rate": rate}
        # pcm: no file a browser decodes; the player reads its samples directly
        result = await player.page.evaluate(COMPARE_JS, compare) if fmt != "pcm" else {}
    assert (end["restarts"], end["attempt"], end["captions"]) == (0, 2, texts)
    duration = sum(second.durations(text))
    assert end["duration"] == pytest.approx(duration, abs=1e-3)
    assert [t for t, _ in second.calls] == texts[len(texts) - len(second.calls) :]
    assert len(second.calls) < len(texts)
    assert player.errors == []
    if fmt == "pcm":
        return
    assert abs(result["timeline"] - duration * rate) <= 1
    tolerance = 1e-4 if fmt == "wav" else CHROMIUM_STEP.get(fmt, 0.0) if layout.exact else 2e-3
    assert result["maxDiff"] <= tolerance


async def test_player_starts_over_when_a_newer_attempt_keeps_less(
    store: Store, browser: Browser
) -> None:
    """An attempt whose encoder cannot continue the file (another setting) keeps nothing: the
    player resets to it and plays the cast from its start again."""
    text = words(2 + 4 + 8 + 16, "over")
    texts = chunk_texts(text)
    first = StepEngine()
    first.hold()
    async with serve(store) as live, httpx.AsyncClient(base_url=live.url, timeout=30) as http:
        async with running_worker(store, first):
            cast_id = await submit_when_ready(http, text, response_format="wav")
            player = await open_player(browser, live.url, cast_id)
            first.allow(2)
            await player.wait_for("two chunks", lambda s: s["chunks"] == 2)
        async with running_worker(store, StepEngine(), encoders=OtherWav):
            end = await player.wait_for("the end", lambda s: s["state"] == "ended")
    assert (end["restarts"], end["attempt"], end["captions"]) == (1, 2, texts)
    assert end["duration"] == pytest.approx(sum(first.durations(text)), abs=1e-3)
    assert player.errors == []


async def submit_when_ready(http: httpx.AsyncClient, text: str, **fields: object) -> str:
    """`submit`, once the worker just started has said it is ready."""
    for _ in range(200):
        response = await http.post("/v1/casts", json={"input": text, **fields})
        if response.status_code != 503:
            break
        await asyncio.sleep(0.05)
    assert response.status_code in (200, 201), response.text
    return str(response.json()["id"])


class OtherWav:
    """speechd.audio's wav encoder under another fingerprint (as if its settings changed)."""

    def __init__(self, fmt: str, sample_rate: int, *, resume: bytes | None = None) -> None:
        self._inner = new_encoder(fmt, sample_rate, resume=resume)
        self.format = fmt
        self.fingerprint = "other/" + self._inner.fingerprint

    def encode(self, pcm, *, final: bool = False) -> bytes:  # type: ignore[no-untyped-def]
        return self._inner.encode(pcm, final=final)

    def checkpoint(self) -> bytes:
        return self._inner.checkpoint()


async def test_player_plays_a_done_cast_across_its_attempts(
    store: Store, server: LiveServer, http: httpx.AsyncClient, browser: Browser
) -> None:
    text = "One two. FLAKY four five six."
    cast_id = await submit(http, text, response_format="pcm")
    await status_when(store, cast_id, lambda s: s.state == CastState.DONE)
    player = await open_player(browser, server.url, cast_id)
    end = await player.wait_for("the end", lambda s: s["state"] == "ended")
    assert end["restarts"] == 0
    assert end["attempt"] == 2
    assert end["captions"] == chunk_texts(text)


async def test_player_shows_a_failure_plainly(
    engine: StepEngine, server: LiveServer, http: httpx.AsyncClient, browser: Browser
) -> None:
    engine.hold()
    cast_id = await submit(http, "Doomed start. Then POISON never renders.", response_format="wav")
    engine.allow(1)
    player = await open_player(browser, server.url, cast_id)
    await player.wait_for("a chunk", lambda s: s["chunks"] == 1)
    engine.run_free()  # the second chunk fails on every attempt
    failed = await player.wait_for("the failure", lambda s: s["state"] == "failed")
    assert "this chunk is poisoned" in failed["error"]
    assert await player.page.is_visible("#failure")
    assert "this chunk is poisoned" in (await player.page.text_content("#failure") or "")
    assert player.errors == []


async def test_player_of_a_cast_that_does_not_exist(server: LiveServer, browser: Browser) -> None:
    page = await browser.new_page()
    response = await page.goto(f"{server.url}/c/AAAAAAAAAAAAAAAAAAAAAA")
    assert response is not None and response.status == 404
    assert await page.text_content("h1") == "No such cast"


async def test_paste_page_submits_and_lands_on_the_player(
    server: LiveServer, browser: Browser
) -> None:
    text = "Hello from the paste page.\nIt has two lines, and the worker speaks both."
    page = await browser.new_page()
    await page.goto(server.url + "/")
    await page.wait_for_selector("#voice option[value='am_adam']", state="attached")
    await page.fill("#text", text)
    await page.select_option("#voice", "am_adam")
    await page.select_option("#format", "wav")
    await page.click("#submit")
    await page.wait_for_url(f"{server.url}/c/*")
    assert await page.text_content("h1") == "Hello from the paste page."
    player = Player(page)
    await page.wait_for_function("window.speechd !== undefined")
    end = await player.wait_for("the end", lambda s: s["state"] == "ended")
    assert end["captions"] == chunk_texts(text)
    cast_id = page.url.rsplit("/", 1)[1]
    async with httpx.AsyncClient(base_url=server.url) as http:
        view = (await http.get(f"/v1/casts/{cast_id}")).json()
    assert (view["voice"], view["format"]) == ("am_adam", "wav")
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / "player-done.png"), full_page=True)
    assert player.errors == []


async def test_paste_page_shows_errors(server: LiveServer, browser: Browser) -> None:
    page = await browser.new_page()
    await page.goto(server.url + "/")
    await page.fill("#text", "   ")
    await page.click("#submit")
    await page.wait_for_selector("#form-error:not([hidden])")
    assert "input" in (await page.text_content("#form-error") or "")
    assert page.url == server.url + "/"


async def test_the_player_keeps_this_browsers_place_and_offers_it_again(
    engine: StepEngine, server: LiveServer, http: httpx.AsyncClient, browser: Browser
) -> None:
    """A book's chapter is a long listen over several visits: the player keeps where this
    browser was (localStorage) as it plays, offers it on the next visit, and forgets it at
    the end."""
    text = words(2 + 4 + 8 + 16 + 16 + 16 + 16, "place")
    duration = sum(engine.durations(text))
    assert duration > 12, duration
    cast_id = await submit(http, text, response_format="wav")
    player = await open_player(browser, server.url, cast_id)
    page = player.page
    await player.wait_for("all its audio", lambda s: s["complete"] and s["state"] == "playing")
    assert await page.is_hidden("#resume")  # no past visit
    box = await page.locator("#bar").bounding_box()
    assert box is not None
    await page.mouse.click(box["x"] + box["width"] * 0.5, box["y"] + box["height"] / 2)
    await player.wait_for("the middle", lambda s: s["clock"] >= duration * 0.5 + 2.5)
    kept = float(await page.evaluate(f"localStorage.getItem('speechd.place.{cast_id}')"))
    assert duration * 0.5 <= kept <= duration

    await page.reload()  # the next visit, in the same browser
    await page.wait_for_function("window.speechd !== undefined")
    again = Player(page)
    shown = await again.wait_for("its offer", lambda s: s["duration"] >= kept)
    assert shown["resumeAt"] == pytest.approx(kept, abs=0.05)
    await page.wait_for_selector("#resume", state="visible")
    minutes, seconds = divmod(int(kept), 60)
    assert await page.text_content("#resume") == f"Resume at {minutes}:{seconds:02d}"
    await page.click("#resume")
    resumed = await again.wait_for("the place", lambda s: s["clock"] >= kept)
    assert resumed["clock"] < kept + 1.0  # from there, not from the start
    assert await page.is_hidden("#resume")
    await again.wait_for("the end", lambda s: s["state"] == "ended", within_s=duration)
    assert await page.evaluate(f"localStorage.getItem('speechd.place.{cast_id}')") is None
    assert player.errors == [] and again.errors == []
