"""`POST /v1/audio/speech` with `stream_format: "sse"` and speechd's `word_timestamps`
extension: each audio delta is followed by the words it holds, in cast-level seconds."""

from __future__ import annotations

import base64
import itertools

import pytest
from litestar.testing import AsyncTestClient

from harness.engines import SAMPLE_RATE, CostEngine, FakeChunkPolicy, chunked_text, fake_words
from harness.workers import expected

from .test_speech import sse_events


def word_starts(text: str) -> list[tuple[str, float]]:
    engine = CostEngine()
    out, at = [], 0
    for chunk in engine.plan(text, "af_heart", FakeChunkPolicy()):
        samples = round(engine.audio_s(chunk.text, 1.0) * SAMPLE_RATE)
        out += [(w.text, (at + w.start) / SAMPLE_RATE) for w in fake_words(chunk.text, samples)]
        at += samples
    return out


async def test_sse_with_word_timestamps_follows_each_delta_with_its_words(
    client: AsyncTestClient,
) -> None:
    text = chunked_text(4)
    response = await client.post(
        "/v1/audio/speech",
        json={"input": text, "stream_format": "sse", "word_timestamps": True},
    )
    assert response.status_code == 200
    events = sse_events(response.text)
    kinds = [e["type"] for e in events]
    assert kinds == ["speech.audio.delta", "speech.audio.words"] * 4 + ["speech.audio.done"]
    audio = b"".join(base64.b64decode(str(e["audio"])) for e in events if "audio" in e)
    assert audio == expected(response.headers["x-cast-id"], text)
    words = [w for e in events if e["type"] == "speech.audio.words" for w in e["words"]]  # type: ignore[union-attr]
    want = word_starts(text)
    assert [w["word"] for w in words] == [w for w, _ in want] == text.split()
    for got, (_, start) in zip(words, want, strict=True):
        assert got["start"] == pytest.approx(start, abs=0.002)
    assert all(w["start"] <= w["end"] for w in words)
    assert all(a["end"] <= b["start"] for a, b in itertools.pairwise(words))


async def test_word_timestamps_change_nothing_else(client: AsyncTestClient) -> None:
    text = chunked_text(3)
    plain = await client.post("/v1/audio/speech", json={"input": text, "stream_format": "sse"})
    assert {e["type"] for e in sse_events(plain.text)} == {
        "speech.audio.delta",
        "speech.audio.done",
    }
    raw = await client.post("/v1/audio/speech", json={"input": text, "word_timestamps": True})
    assert raw.headers["content-type"] == "audio/mpeg"
    assert raw.content == expected(raw.headers["x-cast-id"], text)
    bad = await client.post("/v1/audio/speech", json={"input": text, "word_timestamps": "yes"})
    assert bad.status_code == 400
