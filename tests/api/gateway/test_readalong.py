"""The player reads along in headless Chromium: the word playing is highlighted, a click on a
word seeks there, and the page's subtitle file loads in the browser's own TextTrack."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser

from harness.servers import LiveServer as ServedApp
from harness.servers import start_server
from speechd.casts import CastState
from speechd.durable import Store
from tests.api.gateway._support import LiveServer, StepEngine, chunk_texts, status_when, submit
from tests.support.browser import ARTIFACTS, Player, open_player

pytestmark = pytest.mark.browser


def words(count: int, stem: str) -> str:
    return " ".join(f"{stem}{i}" for i in range(count))


def playing_word(timed: list[dict[str, Any]], clock: float) -> int:
    """The index of the last word started at `clock` (-1 before the first)."""
    return max((i for i, w in enumerate(timed) if w["start"] <= clock + 1e-3), default=-1)


def playing_words(timed: list[dict[str, Any]], clock: float) -> set[int]:
    """The word playing at `clock`, or either neighbour within 2 ms of a word's start: /words
    gives starts in whole ms, the player keeps them to the sample (a clock of 7.2433 s once
    fell between the two)."""
    return {playing_word(timed, clock - 0.002), playing_word(timed, clock + 0.002)}


async def test_the_player_highlights_the_word_playing_and_seeks_by_word(
    store: Store,
    engine: StepEngine,
    server: LiveServer,
    http: httpx.AsyncClient,
    browser: Browser,
) -> None:
    engine.audio_per_char = 0.05  # words of ~0.3 s
    text = words(2 + 4 + 8 + 4, "word")
    cast_id = await submit(http, text, response_format="wav")
    await status_when(store, cast_id, lambda s: s.state == CastState.DONE)
    timed = (await http.get(f"/v1/casts/{cast_id}/words")).json()["words"]
    player = await open_player(browser, server.url, cast_id)
    await player.wait_for("playing", lambda s: s["state"] == "playing" and s["clock"] > 0.3)
    snap = await player.snap()
    assert snap["words"] == len(timed) == len(text.split())
    # Click the third word of the third caption: playback jumps to that word's start.
    target = 2 + 4 + 2
    assert timed[target]["word"] == "word8"
    await player.page.locator("#captions li:nth-child(3) .word").nth(2).click()
    jumped = await player.wait_for(
        "the seek", lambda s: timed[target]["start"] <= s["clock"] < timed[target]["end"] + 0.3
    )
    assert jumped["caption"] == 2
    assert jumped["wordIndex"] in (target, target + 1)
    await player.watch(1.0)
    await player.page.click("#play")  # pause: the clock stops, the highlight must follow it
    paused = await player.wait_for("the pause", lambda s: s["state"] == "paused")
    await player.page.wait_for_timeout(300)  # a few of the page's 100 ms updates
    index = playing_word(timed, paused["clock"])
    assert paused["wordIndex"] == index and paused["word"] == timed[index]["word"]
    highlighted = await player.page.locator(".word.current").all_text_contents()
    assert highlighted == [timed[index]["word"]]
    ARTIFACTS.mkdir(exist_ok=True)
    await player.page.screenshot(path=str(ARTIFACTS / "player-readalong.png"), full_page=True)
    # Every snapshot taken while it played names the word the clock was in.
    for snap in player.snapshots:
        if snap["state"] == "playing" and snap["wordIndex"] >= 0:
            assert snap["wordIndex"] in playing_words(timed, snap["clock"]), snap
    indices = [s["wordIndex"] for s in player.snapshots[-20:] if s["state"] == "playing"]
    assert all(b >= a for a, b in itertools.pairwise(indices))  # the highlight moved forward
    assert player.errors == []


async def test_a_long_chunk_split_into_records_reads_along_as_one_caption(
    store: Store,
    engine: StepEngine,
    server: LiveServer,
    http: httpx.AsyncClient,
    browser: Browser,
) -> None:
    # At 0.25x speed this one chunk is 32 s of audio: three records of at most 15 s, the
    # first with the chunk's text and the word that starts in it, the second with the other.
    engine.audio_per_char = 0.5
    text = "aaaaaaa bbbbbbbb"
    cast_id = await submit(http, text, response_format="wav", speed=0.25)
    await status_when(store, cast_id, lambda s: s.state == CastState.DONE)
    timed = (await http.get(f"/v1/casts/{cast_id}/words")).json()["words"]
    assert timed[1]["start"] > 15  # in the second record
    player = await open_player(browser, server.url, cast_id)
    await player.wait_for("all three records", lambda s: s["chunks"] == 3 and s["complete"])
    first = player.page.locator("#captions li:nth-child(1) .word")
    assert await first.all_text_contents() == ["aaaaaaa", "bbbbbbbb"]
    await first.nth(1).click()
    jumped = await player.wait_for("the seek", lambda s: s["clock"] >= timed[1]["start"])
    assert jumped["clock"] < timed[1]["start"] + 5
    assert jumped["word"] == "bbbbbbbb"
    assert player.errors == []


async def test_a_cast_made_across_attempts_reads_along_over_its_kept_records(
    store: Store,
    engine: StepEngine,
    server: LiveServer,
    http: httpx.AsyncClient,
    browser: Browser,
) -> None:
    # The third chunk fails once: attempt 2 keeps the first two chunks' records (resume by
    # reference) and makes the rest. The player plays the kept records from the head, and
    # reads along over them as over the new attempt's own.
    text = "One two. Three four five six. FLAKY eight nine ten eleven twelve thirteen fourteen."
    cast_id = await submit(http, text, response_format="wav")
    status = await status_when(store, cast_id, lambda s: s.state == CastState.DONE)
    assert status.attempt == 2
    timed = (await http.get(f"/v1/casts/{cast_id}/words")).json()["words"]
    assert [w["word"] for w in timed] == text.split()
    player = await open_player(browser, server.url, cast_id)
    done = await player.wait_for(
        "every record", lambda s: s["chunks"] == len(chunk_texts(text)) and s["complete"]
    )
    assert (done["attempt"], done["restarts"], done["words"]) == (2, 0, len(timed))
    # A word of a kept record (the second chunk's) seeks to its time in the cast.
    target = 2 + 1
    assert timed[target]["word"] == "four"
    await player.page.locator("#captions li:nth-child(2) .word").nth(1).click()
    jumped = await player.wait_for(
        "the seek", lambda s: timed[target]["start"] <= s["clock"] < timed[target]["end"] + 0.3
    )
    assert jumped["caption"] == 1 and jumped["wordIndex"] in (target, target + 1)
    assert player.errors == []


# A <video> with the cast's subtitles as a <track>: Chromium's own WebVTT parser loads it.
TRACK_JS = """async (src) => {
  const video = document.createElement("video");
  const track = document.createElement("track");
  track.kind = "subtitles";
  track.src = src;
  track.default = true;
  video.append(track);
  document.body.append(video);
  track.track.mode = "hidden";
  const outcome = await new Promise((resolve) => {
    track.addEventListener("load", () => resolve("load"));
    track.addEventListener("error", () => resolve("error"));
    setTimeout(() => resolve("timeout"), 10000);
  });
  const cues = Array.from(track.track.cues || []);
  return {
    outcome,
    readyState: track.readyState,
    cues: cues.map((c) => ({ start: c.startTime, end: c.endTime, text: c.text })),
  };
}"""


async def test_the_page_offers_subtitles_that_chromium_loads_as_a_text_track(
    store: Store, server: LiveServer, http: httpx.AsyncClient, browser: Browser
) -> None:
    text = "One two. Three four five six. Seven eight nine ten eleven twelve thirteen fourteen."
    cast_id = await submit(http, text)
    await status_when(store, cast_id, lambda s: s.state == CastState.DONE)
    player = await open_player(browser, server.url, cast_id)
    await player.wait_for("the captions", lambda s: s["chunks"] == len(chunk_texts(text)))
    link = player.page.locator("#subtitles")
    href = await link.get_attribute("href")
    assert href == f"/v1/casts/{cast_id}/captions.vtt"
    assert await link.get_attribute("download") is not None
    assert await player.page.get_attribute("#subtitles-srt", "href") == (
        f"/v1/casts/{cast_id}/captions.srt"
    )
    loaded = await player.page.evaluate(TRACK_JS, href)
    assert loaded["outcome"] == "load" and loaded["readyState"] == 2  # HTMLTrackElement.LOADED
    cues = loaded["cues"]
    assert cues
    # The cue text keeps the words' inline timestamps; without them it is the cast's text.
    heard = [w for cue in cues for w in _untagged(cue["text"]).split()]
    assert heard == text.split()
    timed = (await http.get(f"/v1/casts/{cast_id}/words")).json()["words"]
    assert cues[0]["start"] == pytest.approx(timed[0]["start"], abs=1e-3)
    assert all(c["start"] < c["end"] for c in cues)
    assert player.errors == []


def _untagged(text: str) -> str:
    return re.sub(r"<[^>]*>", "", text)


KOKORO_TEXT = (
    "The old ferryman rowed travelers across the water, telling stories about storms. "
    "Nobody ever asked him where the strange lights came from."
)


@pytest.fixture(scope="module")
def kokoro(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedApp]:
    data = tmp_path_factory.mktemp("readalong-serve") / "data"
    args = ["serve", "--data-dir", str(data), "--model-dir", str(model_dir), "--device", "cpu"]
    with start_server(args, timeout=240) as server:
        yield server


@pytest.mark.model
@pytest.mark.slow
async def test_the_real_model_reads_along_in_the_browser(
    kokoro: ServedApp, browser: Browser
) -> None:
    """`speechd serve` on the Kokoro-82M weights: every word is timed, the subtitles load in
    Chromium, and the player's highlight follows the audio to the last word."""
    async with httpx.AsyncClient(base_url=kokoro.url, timeout=120) as http:
        created = await http.post("/v1/casts", json={"input": KOKORO_TEXT, "voice": "af_heart"})
        cast_id = created.json()["id"]
        player = await open_player(browser, kokoro.url, cast_id)
        end = await player.wait_for("the end", lambda s: s["state"] == "ended", within_s=300)
        page = (await http.get(f"/v1/casts/{cast_id}/words")).json()
    timed = page["words"]
    assert [w["word"] for w in timed] == KOKORO_TEXT.split()
    assert page["duration"] == pytest.approx(end["duration"], abs=0.01)
    assert all(a["end"] <= b["start"] for a, b in itertools.pairwise(timed))
    assert timed[-1]["end"] <= page["duration"]
    assert end["words"] == len(timed) and end["word"] == timed[-1]["word"]
    playing = [s for s in player.snapshots if s["state"] == "playing" and s["wordIndex"] >= 0]
    assert playing
    for snap in playing:  # the highlight named the word the audio clock was in
        assert snap["wordIndex"] in playing_words(timed, snap["clock"]), snap
    loaded = await player.page.evaluate(TRACK_JS, f"/v1/casts/{cast_id}/captions.vtt")
    assert loaded["outcome"] == "load" and loaded["cues"]
    assert player.errors == []


async def test_the_player_highlights_the_text_as_sent_where_this_tab_made_the_cast(
    server: LiveServer, browser: Browser
) -> None:
    # The paste page keeps the text in the tab's sessionStorage; the player shows it as sent
    # (spacing, blank lines) and highlights, in it, the characters each word came from.
    text = "  First   words,\n\nthen   more of them here for the player to read."
    page = await browser.new_page()
    await page.goto(server.url + "/")
    await page.wait_for_selector("#voice option[value='am_adam']", state="attached")
    await page.fill("#text", text)
    await page.select_option("#format", "wav")
    await page.click("#submit")
    await page.wait_for_url(f"{server.url}/c/*")
    player = Player(page)
    await page.wait_for_function("window.speechd !== undefined")
    end = await player.wait_for("the end", lambda s: s["state"] == "ended", within_s=60)
    assert end["words"] == len(text.split())
    assert await page.text_content("#source") == text  # the user's own text, whole
    seen = [s for s in player.snapshots if s["wordIndex"] >= 0 and s["state"] == "playing"]
    assert seen, player.snapshots[-3:]
    for snap in seen:
        assert snap["source"] == snap["word"], snap  # the planner double reads words as sent
    highlighted = await page.locator("#source .word").all_text_contents()
    assert highlighted == text.split()
    # Another tab (a listener given the link) has no text: captions only.
    other = await open_player(browser, server.url, page.url.rsplit("/", 1)[1])
    await other.wait_for("the captions", lambda s: s["chunks"] > 0)
    assert await other.page.is_hidden("#source")
    assert player.errors == [] and other.errors == []
