"""Subtitles from the client: `speechd-client say/follow --captions FILE` and
`Client.captions`, against the live server (see conftest)."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
import webvtt

from harness.servers import LiveServer
from speechd_client import CAPTION_FORMATS, AsyncClient, CastNotFound, Client

from ._support import audio_of, run_cli
from .conftest import KEY

_texts = itertools.count()


def text(words: int = 12) -> str:
    """A text no other test speaks (identical requests share one cast)."""
    n = next(_texts)
    return " ".join(f"captions{n} word{i}." for i in range(words))


def cue_words(path: Path) -> tuple[list[str], float]:
    """The words of a subtitle file (inline timestamps dropped) and its last cue's end."""
    cues = (webvtt.from_srt if path.suffix == ".srt" else webvtt.read)(str(path)).captions
    hours, minutes, seconds = cues[-1].end.replace(",", ".").split(":")
    end = int(hours) * 3600 + int(minutes) * 60 + float(seconds)
    return [w for c in cues for w in re.sub(r"<[^>]*>", "", c.raw_text).split()], end


@pytest.mark.parametrize("suffix", ["vtt", "srt"])
def test_say_writes_the_subtitles_beside_the_audio(
    server: LiveServer, tmp_path: Path, suffix: str
) -> None:
    said = text()
    audio, captions = tmp_path / "out.wav", tmp_path / f"out.{suffix}"
    run = run_cli("say", said, "-o", str(audio), "--captions", str(captions), url=server.url,
                  key=KEY)  # fmt: skip
    assert (run.code, run.stderr) == (0, "")
    words, end = cue_words(captions)
    assert words == said.split()
    _, seconds = audio_of(audio.read_bytes())
    assert end == pytest.approx(seconds, abs=0.05)  # the last cue ends with the audio
    assert captions.read_text(encoding="utf-8").startswith("WEBVTT" if suffix == "vtt" else "1\n")


def test_follow_writes_the_subtitles_too(server: LiveServer, tmp_path: Path) -> None:
    said = text(20)
    link = run_cli("cast", said, url=server.url, key=KEY).stdout.decode().strip()
    captions = tmp_path / "cast.vtt"
    run = run_cli("follow", link, "-o", str(tmp_path / "cast.mp3"), "--captions", str(captions),
                  url=server.url)  # fmt: skip
    assert run.code == 0, run.stderr
    assert cue_words(captions)[0] == said.split()


def test_captions_into_a_missing_folder_is_a_usage_error(
    server: LiveServer, tmp_path: Path
) -> None:
    audio = tmp_path / "out.mp3"
    run = run_cli("say", text(), "-o", str(audio), "--captions", str(tmp_path / "no" / "x.vtt"),
                  url=server.url, key=KEY)  # fmt: skip
    assert run.code == 2 and "cannot write captions" in run.error_line
    assert not audio.exists()  # refused before any work


async def test_the_library_reads_captions(server: LiveServer) -> None:
    said = text()
    with Client(server.url, api_key=KEY) as client:
        with client.speech(said) as audio:
            b"".join(audio)
        assert audio.cast_id is not None
        vtt = client.captions(audio.cast_id)
        srt = client.captions(audio.cast_id, format="srt")
        with pytest.raises(ValueError, match="vtt or srt"):
            client.captions(audio.cast_id, format="ass")
        with pytest.raises(CastNotFound):
            client.captions("AAAAAAAAAAAAAAAAAAAAAA")
    assert CAPTION_FORMATS == ("vtt", "srt")
    assert vtt.startswith("WEBVTT\n") and "-->" in srt
    async with AsyncClient(server.url, api_key=KEY) as async_client:
        assert await async_client.captions(audio.cast_id) == vtt


def test_records_and_the_cast_view_name_the_words(server: LiveServer) -> None:
    said = text()
    with Client(server.url, api_key=KEY) as client:
        created = client.submit_cast(said)
        audio = [r for r in client.follow_records(created.id) if r.event == "audio"]
        view = client.cast_status(created.id)
    assert [w[2] for r in audio for w in r.words] == said.split()
    assert {r.unit for r in audio} == {"word"}
    assert all(0 <= s <= e <= (r.duration_ms or 0) for r in audio for s, e, _ in r.words)
    assert view.captions_url.endswith(f"/v1/casts/{created.id}/captions.vtt")
    assert view.words_url.endswith(f"/v1/casts/{created.id}/words")
