"""The captions routes: a cast's words as WebVTT, SubRip and JSON with cast-level times, for
done and live casts, read back with a real WebVTT parser; and the words in the SSE records."""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import re
import threading
from pathlib import Path

import httpx
import pytest
import webvtt

from harness.engines import fake_words
from speechd.api.gateway import _routes as gateway_routes
from speechd.api.gateway._captions import srt
from speechd.api.gateway._captions import webvtt as render_vtt
from speechd.audio import SAMPLE_RATE
from speechd.casts import CastCaptions, CastState, CastWord
from speechd.casts.schema import catalog_stream
from speechd.durable import Store
from tests.api.gateway._support import (
    LiveServer,
    StepEngine,
    chunk_texts,
    raw_get,
    sse_events,
    status_when,
    submit,
    until,
)

TEXT = (
    "One two. Three four five six. Seven eight nine ten eleven twelve thirteen fourteen. "
    "Fifteen sixteen seventeen eighteen nineteen twenty twenty-one twenty-two."
)


def expected_starts(engine: StepEngine, text: str) -> list[tuple[str, float]]:
    """(word, start in seconds) as the worker publishes them: chunk after chunk."""
    out: list[tuple[str, float]] = []
    at = 0
    for chunk, seconds in zip(chunk_texts(text), engine.durations(text), strict=True):
        samples = round(seconds * SAMPLE_RATE)
        out += [(w.text, (at + w.start) / SAMPLE_RATE) for w in fake_words(chunk, samples)]
        at += samples
    return out


def seconds(stamp: str) -> float:
    """A WebVTT or SubRip timestamp in seconds."""
    hours, minutes, rest = stamp.replace(",", ".").split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(rest)


def vtt_words(cue_text: str) -> list[str]:
    return re.sub(r"<[^>]*>", "", cue_text).split()


async def test_a_done_casts_words_have_cast_level_times(
    store: Store, engine: StepEngine, server: LiveServer, http: httpx.AsyncClient
) -> None:
    cast_id = await submit(http, TEXT, response_format="wav")
    await status_when(store, cast_id, lambda s: s.state == CastState.DONE)
    response = await http.get(f"/v1/casts/{cast_id}/words")
    assert response.status_code == 200
    assert response.headers["cache-control"].startswith("public")
    page = response.json()
    assert (page["id"], page["status"], page["complete"], page["unit"]) == (
        cast_id,
        "done",
        True,
        "word",
    )
    assert page["duration"] == pytest.approx(sum(engine.durations(TEXT)), abs=0.002)
    words = page["words"]
    want = expected_starts(engine, TEXT)
    assert [w["word"] for w in words] == [w for w, _ in want] == TEXT.split()
    for got, (_, start) in zip(words, want, strict=True):
        assert got["start"] == pytest.approx(start, abs=0.002)
    assert all(w["start"] <= w["end"] <= page["duration"] for w in words)
    assert all(a["end"] <= b["start"] for a, b in itertools.pairwise(words))
    # The wav file is as long as the words say.
    audio = (await http.get(f"/v1/casts/{cast_id}/audio")).content
    assert (len(audio) - 44) / 2 / SAMPLE_RATE == pytest.approx(page["duration"], abs=0.002)
    view = (await http.get(f"/v1/casts/{cast_id}")).json()
    assert view["captions_url"].endswith(f"/v1/casts/{cast_id}/captions.vtt")
    assert view["words_url"].endswith(f"/v1/casts/{cast_id}/words")


async def test_webvtt_and_srt_parse_with_a_real_parser(
    store: Store, engine: StepEngine, server: LiveServer, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    cast_id = await submit(http, TEXT)
    await status_when(store, cast_id, lambda s: s.state == CastState.DONE)
    words = (await http.get(f"/v1/casts/{cast_id}/words")).json()["words"]
    vtt = await http.get(f"/v1/casts/{cast_id}/captions.vtt")
    assert vtt.status_code == 200
    assert vtt.headers["content-type"] == "text/vtt; charset=utf-8"
    assert vtt.text.startswith("WEBVTT\n")
    cues = webvtt.from_buffer(io.StringIO(vtt.text)).captions
    assert [w for cue in cues for w in vtt_words(cue.raw_text)] == TEXT.split()
    assert cues[0].start_in_seconds == pytest.approx(words[0]["start"], abs=0.001)
    assert all(seconds(c.start) < seconds(c.end) for c in cues)
    assert all(seconds(a.end) <= seconds(b.start) + 1e-3 for a, b in itertools.pairwise(cues))
    assert all(len(line) <= 42 for cue in cues for line in cue.text.split("\n"))
    # Each word after a cue's first carries its start as an inline timestamp.
    stamps = re.findall(r"<(\d\d):(\d\d):(\d\d)\.(\d{3})>", vtt.text)
    starts = [((int(h) * 60 + int(m)) * 60 + int(s)) * 1000 + int(ms) for h, m, s, ms in stamps]
    assert len(starts) == len(words) - len(cues)
    assert set(starts) <= {round(w["start"] * 1000) for w in words}
    response = await http.get(f"/v1/casts/{cast_id}/captions.srt")
    assert response.headers["content-type"] == "application/x-subrip; charset=utf-8"
    path = tmp_path / "cast.srt"
    path.write_text(response.text, encoding="utf-8")
    srt_cues = webvtt.from_srt(str(path)).captions
    assert [c.text for c in srt_cues] == [c.text for c in cues]
    assert [c.start for c in srt_cues] == [c.start for c in cues]


async def test_a_live_cast_gives_the_words_it_has_so_far(
    store: Store, engine: StepEngine, server: LiveServer, http: httpx.AsyncClient
) -> None:
    texts = chunk_texts(TEXT)
    engine.hold()
    cast_id = await submit(http, TEXT)
    queued = await http.get(f"/v1/casts/{cast_id}/words")
    assert queued.json()["words"] == [] and queued.json()["complete"] is False
    assert (await http.get(f"/v1/casts/{cast_id}/captions.vtt")).text == "WEBVTT\n"
    engine.allow(2)
    await status_when(store, cast_id, lambda s: s.chunks_done == 2)
    live = await http.get(f"/v1/casts/{cast_id}/words")
    assert live.headers["cache-control"] == "no-store"
    assert live.headers["x-cast-status"] == "generating"
    page = live.json()
    assert page["complete"] is False
    assert [w["word"] for w in page["words"]] == " ".join(texts[:2]).split()
    vtt = (await http.get(f"/v1/casts/{cast_id}/captions.vtt")).text
    cues = webvtt.from_buffer(io.StringIO(vtt)).captions
    assert [w for cue in cues for w in vtt_words(cue.raw_text)] == " ".join(texts[:2]).split()
    engine.run_free()
    await status_when(store, cast_id, lambda s: s.state == CastState.DONE)
    done = (await http.get(f"/v1/casts/{cast_id}/words")).json()
    assert [w["word"] for w in done["words"]] == TEXT.split()
    assert done["words"][: len(page["words"])] == page["words"]  # nothing moved


async def test_words_add_up_across_attempts(
    store: Store, engine: StepEngine, server: LiveServer, http: httpx.AsyncClient
) -> None:
    text = "One two. Three four five six. FLAKY eight nine ten eleven twelve thirteen fourteen."
    cast_id = await submit(http, text)
    status = await status_when(store, cast_id, lambda s: s.state == CastState.DONE)
    assert status.attempt == 2
    words = (await http.get(f"/v1/casts/{cast_id}/words")).json()["words"]
    want = expected_starts(engine, text)
    assert [w["word"] for w in words] == [w for w, _ in want]
    for got, (_, start) in zip(words, want, strict=True):
        assert got["start"] == pytest.approx(start, abs=0.002)


async def test_captions_of_failed_missing_and_malformed_casts(
    store: Store, engine: StepEngine, server: LiveServer, http: httpx.AsyncClient
) -> None:
    cast_id = await submit(http, "Doomed start. Then POISON never renders.")
    await status_when(store, cast_id, lambda s: s.state == CastState.FAILED)
    for route in ("captions.vtt", "captions.srt", "words"):
        failed = await http.get(f"/v1/casts/{cast_id}/{route}")
        assert failed.status_code == 500
        assert failed.json()["error"]["code"] == "cast_failed"
        for missing in ("AAAAAAAAAAAAAAAAAAAAAA", "nope", "..%2Fjobs"):
            response = await http.get(f"/v1/casts/{missing}/{route}")
            assert response.status_code == 404, (missing, route)


async def test_sse_audio_events_carry_the_words(
    store: Store, server: LiveServer, http: httpx.AsyncClient
) -> None:
    cast_id = await submit(http, TEXT)
    await status_when(store, cast_id, lambda s: s.state == CastState.DONE)
    async with httpx.AsyncClient(timeout=10) as client:
        body = (await client.get(f"{server.url}/v1/casts/{cast_id}/events")).text
    audio = [json.loads(e["data"]) for e in sse_events(body) if e.get("event") == "audio"]
    heard = []
    for record in audio:
        headers = dict(record["headers"])
        assert headers["u"] == "word"
        words = json.loads(headers["w"])
        assert all(0 <= w[0] <= w[1] <= int(headers["d"]) for w in words)
        heard += [w[2] for w in words]
    assert heard == TEXT.split()


def test_cues_split_at_sentences_pauses_and_length() -> None:
    def word(text: str, start: int, end: int) -> CastWord:
        return CastWord(text, start, end)

    long = [word(f"w{i:02d}", 2000 + 300 * i, 2000 + 300 * i + 250) for i in range(20)]
    captions = CastCaptions(
        [word("Hi.", 0, 300), word("a<b&c", 400, 700), *long, word("late", 20_000, 20_400)],
        "word",
        20_500,
    )
    text = render_vtt(captions)
    assert "a&lt;b&amp;c" in text and "a<b" not in text
    cues = webvtt.from_buffer(io.StringIO(text)).captions
    texts = [vtt_words(c.raw_text) for c in cues]
    assert texts[0] == ["Hi."]  # a sentence end closes its cue
    assert texts[-1] == ["late"]  # after a long pause: a cue of its own
    assert all(seconds(c.end) - seconds(c.start) <= 7.0 + 1.0 for c in cues)
    assert all(len(line) <= 42 for c in cues for line in c.text.split("\n"))
    assert seconds(cues[0].end) == pytest.approx(0.4)  # held until the next cue starts
    assert srt(CastCaptions([], "", 0)) == "" and render_vtt(CastCaptions([], "", 0)) == "WEBVTT\n"


async def test_captions_expose_only_what_was_spoken(
    store: Store, engine: StepEngine, server: LiveServer, http: httpx.AsyncClient
) -> None:
    text = "Public opening. Secret words nobody has heard yet, not one of them."
    engine.hold()
    cast_id = await submit(http, text)
    engine.allow(1)
    await status_when(store, cast_id, lambda s: s.chunks_done == 1)
    for route in ("captions.vtt", "captions.srt", "words"):
        response = await http.get(f"/v1/casts/{cast_id}/{route}")
        assert response.status_code == 200
        assert "Public" in response.text and "Secret" not in response.text
    encoded = catalog_stream(cast_id).replace("/", "%2F")
    for target in (
        "/v1/casts/..%2Fjobs/captions.vtt",
        "/v1/casts/%2e%2e%2fjobs/words",
        f"/v1/casts/{encoded}/captions.srt",
        f"/v1/casts/{cast_id}/../../{catalog_stream(cast_id)}/words",
        f"/v1/casts/{cast_id[:-1]}/captions.vtt",
        f"/v1/casts/{'A' * 5000}/words",
    ):
        response = await raw_get(server.port, target)
        assert response.status in (400, 404), target
        assert b"Secret" not in response.body


@pytest.mark.parametrize(
    ("route", "assembly"),
    [("captions.vtt", "webvtt"), ("captions.srt", "srt"), ("words", "_words_json")],
)
async def test_captions_are_assembled_off_the_event_loop(
    route: str,
    assembly: str,
    store: Store,
    server: LiveServer,
    http: httpx.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A 200,000-character cast's captions are tens of thousands of words, a tenth of a second
    # or more of work: while one is being put together, the api keeps answering.
    cast_id = await submit(http, TEXT, response_format="wav")
    await status_when(store, cast_id, lambda s: s.state == CastState.DONE)
    entered, release = threading.Event(), threading.Event()
    real = getattr(gateway_routes, assembly)

    def held(*args: object) -> object:
        entered.set()
        release.wait(10)  # a failsafe: the test releases it once /healthz has answered
        return real(*args)

    monkeypatch.setattr(gateway_routes, assembly, held)
    answer = asyncio.create_task(http.get(f"/v1/casts/{cast_id}/{route}"))
    try:
        await until(entered.is_set)
        assert (await http.get("/healthz")).status_code == 200
        assert not answer.done()  # it was still being assembled while /healthz answered
    finally:
        release.set()
    response = await answer
    assert response.status_code == 200 and "three" in response.text.lower()
