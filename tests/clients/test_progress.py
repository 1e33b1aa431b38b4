"""The progress line the command line draws: a queued cast's place in line and estimated
start come from `GET /v1/casts/{id}`."""

from __future__ import annotations

import io
from typing import Any

import msgspec
import pytest

from speechd_client import CastView
from speechd_client._progress import ProgressBar


def view(status: str, **progress: Any) -> CastView:
    body = {
        "id": "abc", "url": "http://x/c/abc", "status": status, "title": "t", "voice": "af_heart",
        "speed": 1.0, "format": "mp3", "model": "kokoro", "sample_rate": 24000, "created": 0,
        "attempt": 0, "error": None, "audio_url": "a", "records_url": "r", "events_url": "e",
        "progress": {"chunks_done": 0, "chunks_planned": None, "audio_seconds": 0.0,
                     "lead_seconds": None, **progress},
    }  # fmt: skip
    return msgspec.json.decode(msgspec.json.encode(body), type=CastView)


@pytest.mark.parametrize(
    ("progress", "shown"),
    [
        ({}, "queued  0.0 s audio"),  # a server that does not say (an older one)
        ({"queue_position": 0, "starts_in_seconds": 0.4}, "queued, next, starts now"),
        ({"queue_position": 3, "starts_in_seconds": 41.6}, "queued, 3 ahead, starts in ~42 s"),
        ({"queue_position": 2, "starts_in_seconds": None}, "queued, 2 ahead  0.0 s audio"),
    ],
)
def test_a_queued_cast_shows_its_place_in_line(progress: dict[str, Any], shown: str) -> None:
    bar = ProgressBar(io.StringIO(), "say")
    bar.cast(view("queued", **progress))
    assert shown in bar.line()


def test_a_held_cast_shows_when_it_plays_then_its_lead() -> None:
    bar = ProgressBar(io.StringIO(), "say")
    held = {"lead_seconds": 14.0, "hold_seconds": 12.0, "plays_in_seconds": 11.6}
    bar.cast(view("generating", **held))
    assert "plays in ~12 s (held back to play through)" in bar.line()
    assert "lead" not in bar.line()
    bar.cast(view("generating", lead_seconds=2.5, hold_seconds=12.0))
    assert "lead +2.5 s" in bar.line() and "plays in" not in bar.line()
