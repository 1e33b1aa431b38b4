"""Whole files are whole (issue 14): a `stream: false` answer, a finished cast's /audio and
its byte ranges put back together are files that Python's `wave`, `ffmpeg -xerror` and
Chromium read as exactly the audio they hold; a wav still growing keeps the streaming
sentinel (its length is not known yet)."""

from __future__ import annotations

import io
import itertools
import shutil
import struct
import subprocess
import wave
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Browser

from speechd.audio import FORMATS, SAMPLE_RATE, finished_bytes
from speechd.casts import CastState
from speechd.durable import Store
from tests.api.gateway._support import LiveServer, StepEngine, status_when, submit

TEXT = "One two. Three four five six. Seven eight nine ten eleven twelve."
FFMPEG = shutil.which("ffmpeg")


def ffmpeg_reads(data: bytes, fmt: str, tmp_path: Path) -> None:
    """`ffmpeg -xerror` decodes `data` to its end without a word of complaint."""
    if FFMPEG is None:
        pytest.skip("no ffmpeg (scripts/test.sh installs it)")
    path = tmp_path / f"cast.{fmt}"
    path.write_bytes(data)
    raw = ["-f", "s16le", "-ar", str(SAMPLE_RATE), "-ac", "1"] if fmt == "pcm" else []
    result = subprocess.run(
        [FFMPEG, "-v", "error", "-xerror", *raw, "-i", str(path), "-f", "null", "-"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stderr) == (0, ""), result.stderr


def assert_true_wav(data: bytes, seconds: float) -> None:
    riff, data_size = struct.unpack("<I", data[4:8])[0], struct.unpack("<I", data[40:44])[0]
    assert (riff, data_size) == (len(data) - 8, len(data) - 44)
    with wave.open(io.BytesIO(data)) as reader:
        assert reader.getnframes() == (len(data) - 44) // 2
        assert reader.getframerate() == SAMPLE_RATE
        assert reader.getnframes() / SAMPLE_RATE == pytest.approx(seconds, abs=0.01)


def test_finished_bytes_patches_only_the_wav_header() -> None:
    streamed = b"RIFF\xff\xff\xff\xffWAVE" + bytes(32) + b"\x01\x02" * 100
    whole = finished_bytes("wav", streamed, offset=0, size=len(streamed))
    assert whole[44:] == streamed[44:] and whole[:4] == b"RIFF"
    assert struct.unpack("<I", whole[4:8])[0] == len(streamed) - 8
    assert struct.unpack("<I", whole[40:44])[0] == len(streamed) - 44
    # Any piece at any offset agrees with the whole.
    for start, stop in [(0, 1), (3, 9), (40, 50), (44, 60), (10, 244)]:
        piece = finished_bytes("wav", streamed[start:stop], offset=start, size=len(streamed))
        assert piece == whole[start:stop]
    for fmt in ("mp3", "opus", "aac", "flac", "pcm"):
        assert finished_bytes(fmt, streamed, offset=0, size=len(streamed)) is streamed


@pytest.mark.parametrize("fmt", FORMATS)
async def test_every_finished_file_reads_whole(
    fmt: str,
    store: Store,
    engine: StepEngine,
    http: httpx.AsyncClient,
    tmp_path: Path,
) -> None:
    seconds = sum(engine.durations(TEXT))
    answer = await http.post(
        "/v1/audio/speech", json={"input": TEXT, "response_format": fmt, "stream": False}
    )
    assert answer.status_code == 200
    whole = answer.content
    assert answer.headers["content-length"] == str(len(whole))
    cast_id = answer.headers["x-cast-id"]
    served = await http.get(f"/v1/casts/{cast_id}/audio")
    assert served.content == whole  # the same file either way
    # Byte ranges put back together are the same file, the header's piece included.
    size = len(whole)
    cuts = [0, 5, 43, 700, size // 2, size]
    pieces = []
    for start, stop in itertools.pairwise(cuts):
        part = await http.get(
            f"/v1/casts/{cast_id}/audio", headers={"range": f"bytes={start}-{stop - 1}"}
        )
        assert part.status_code == 206
        pieces.append(part.content)
    assert b"".join(pieces) == whole
    if fmt == "wav":
        assert_true_wav(whole, seconds)
    if fmt == "pcm":
        assert len(whole) / 2 / SAMPLE_RATE == pytest.approx(seconds, abs=0.01)
    ffmpeg_reads(whole, fmt, tmp_path)


async def test_a_cast_made_across_attempts_reads_whole(
    store: Store, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    # The third chunk fails once: attempt 2 keeps the first two records (the header among
    # them) and makes the rest, so the file is read across two attempts' records.
    text = "One two. Three four five six. FLAKY eight nine ten eleven twelve thirteen fourteen."
    cast_id = await submit(http, text, response_format="wav")
    await status_when(store, cast_id, lambda s: s.state == CastState.DONE)
    assert (await http.get(f"/v1/casts/{cast_id}")).json()["attempt"] == 2
    whole = (await http.get(f"/v1/casts/{cast_id}/audio")).content
    assert_true_wav(whole, sum(StepEngine().durations(text)))
    size = len(whole)
    pieces = []
    for start, stop in itertools.pairwise([0, 7, 44, size // 3, size]):
        part = await http.get(
            f"/v1/casts/{cast_id}/audio", headers={"range": f"bytes={start}-{stop - 1}"}
        )
        assert part.status_code == 206
        pieces.append(part.content)
    assert b"".join(pieces) == whole
    answer = await http.post(
        "/v1/audio/speech", json={"input": text, "response_format": "wav", "stream": False}
    )
    assert answer.headers["x-cast-id"] == cast_id
    assert answer.content == whole
    ffmpeg_reads(whole, "wav", tmp_path)


async def test_a_wav_still_growing_keeps_the_sentinel(
    store: Store, engine: StepEngine, http: httpx.AsyncClient
) -> None:
    engine.hold()
    cast_id = await submit(http, TEXT, response_format="wav")
    engine.allow(1)
    await status_when(store, cast_id, lambda s: s.chunks_done == 1)
    async with http.stream("GET", f"/v1/casts/{cast_id}/audio") as live:
        assert live.headers["x-cast-status"] == "generating"
        head = b""
        async for data in live.aiter_bytes():
            head += data
            if len(head) >= 44:
                break
        assert head[4:8] == b"\xff\xff\xff\xff" and head[40:44] == b"\xff\xff\xff\xff"
    engine.run_free()
    await status_when(store, cast_id, lambda s: s.state == CastState.DONE)
    done = (await http.get(f"/v1/casts/{cast_id}/audio")).content
    assert done[4:8] != b"\xff\xff\xff\xff"


# Fetches each file from the page's own origin and decodes it whole; returns its duration in
# seconds, or the error's text.
_DECODE_JS = """async (urls) => {
  const out = [];
  for (const url of urls) {
    try {
      const bytes = await (await fetch(url)).arrayBuffer();
      const buffer = await new OfflineAudioContext(1, 1, 48000).decodeAudioData(bytes);
      out.push(buffer.duration);
    } catch (e) {
      out.push(String(e));
    }
  }
  return out;
}"""


@pytest.mark.browser
async def test_chromium_decodes_every_finished_file_whole(
    store: Store,
    engine: StepEngine,
    server: LiveServer,
    http: httpx.AsyncClient,
    browser: Browser,
) -> None:
    seconds = sum(engine.durations(TEXT))
    urls = []
    for fmt in (f for f in FORMATS if f != "pcm"):  # pcm has no header to decode by
        cast_id = await submit(http, TEXT, response_format=fmt)
        await status_when(store, cast_id, lambda s: s.state == CastState.DONE)
        urls.append(f"/v1/casts/{cast_id}/audio")
    page = await browser.new_page()
    await page.goto(server.url + "/")
    durations = await page.evaluate(_DECODE_JS, urls)
    for fmt, duration in zip((f for f in FORMATS if f != "pcm"), durations, strict=True):
        assert isinstance(duration, float), (fmt, duration)
        # The codecs' priming and padding add at most a frame or two (mp3: 1105 samples).
        assert seconds - 0.01 <= duration <= seconds + 0.2, (fmt, duration)
