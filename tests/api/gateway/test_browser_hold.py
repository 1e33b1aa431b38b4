"""The player on a cast the device cannot make in real time (the cost model at twice real
time, free-running): it waits out the start hold the worker states ("Starts in N s"), then
plays from the first audio to the end without a stall."""

from __future__ import annotations

import itertools

import httpx
import pytest
from playwright.async_api import Browser

from tests.api.gateway._support import LiveServer, StepEngine, submit
from tests.support.browser import Player, open_player

pytestmark = pytest.mark.browser


@pytest.fixture
def engine() -> StepEngine:
    return StepEngine(rtf=2.0, overhead_s=0.02, audio_per_char=0.01)


def stalls(player: Player) -> int:
    """Times playback, once started, ran into the live edge (the timeline waits there)."""
    states = [s["state"] for s in player.snapshots]
    began = states.index("playing")
    played = states[began:]
    return sum(1 for a, b in itertools.pairwise(played) if b == "buffering" != a)


async def test_player_waits_out_the_start_hold_then_plays_through(
    engine: StepEngine, server: LiveServer, http: httpx.AsyncClient, browser: Browser
) -> None:
    text = " ".join(f"held{i}" for i in range(2 + 4 + 8 + 16 + 16))
    cast_id = await submit(http, text, response_format="wav")
    player = await open_player(browser, server.url, cast_id, held=True)
    held = await player.wait_for("the hold", lambda s: s["state"] == "held", within_s=30)
    assert held["holdS"] > 0 and held["clock"] == 0 and held["chunks"] >= 1
    assert (await player.page.text_content("#status") or "").startswith("Starts in ")
    end = await player.wait_for("the end", lambda s: s["state"] == "ended", within_s=60)
    assert end["complete"] and end["error"] is None
    # Nothing sounded during the hold. The state and the position both read the audio clock,
    # which may move on between the two reads by a render quantum (about 3 ms) at most.
    sounded = [s for s in player.snapshots if s["state"] == "held" and s["clock"] > 0.01]
    assert sounded == [], sounded
    assert stalls(player) == 0
    assert end["clock"] == pytest.approx(end["duration"], abs=0.02)
    assert player.errors == []


async def test_a_player_opened_to_start_now_plays_from_the_first_audio(
    engine: StepEngine, server: LiveServer, http: httpx.AsyncClient, browser: Browser
) -> None:
    text = " ".join(f"now{i}" for i in range(2 + 4 + 8 + 16 + 16))
    cast_id = await submit(http, text, response_format="wav")
    player = await open_player(browser, server.url, cast_id)  # ?start=now
    await player.wait_for("the end", lambda s: s["state"] == "ended", within_s=60)
    assert all(s["state"] != "held" for s in player.snapshots)
    assert stalls(player) > 0  # it ran into the live edge: the device is slower than that
