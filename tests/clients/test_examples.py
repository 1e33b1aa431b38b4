"""clients/examples/, run as written against the live server (see conftest); only the
server's address and key come from the environment, as the examples say."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx

from harness.servers import ROOT, LiveServer

from ._support import audio_of, cli_env
from .conftest import KEY, VOICES

EXAMPLES = ROOT / "clients" / "examples"
DEFAULT = "http://127.0.0.1:8000"


def run(args: list[str], server: LiveServer, cwd: Path) -> str:
    done = subprocess.run(
        args, cwd=cwd, env=cli_env(server.url, KEY), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_openai_sdk_streams_to_a_file(server: LiveServer, tmp_path: Path) -> None:
    out = run([sys.executable, str(EXAMPLES / "openai_stream.py"), "out.mp3"], server, tmp_path)
    assert re.fullmatch(rf"wrote out\.mp3; replay: {re.escape(server.url)}/c/\S+\n", out), out
    assert audio_of((tmp_path / "out.mp3").read_bytes())[1] > 0


def test_the_library_example(server: LiveServer, tmp_path: Path) -> None:
    out = run([sys.executable, str(EXAMPLES / "library.py"), "out.wav"], server, tmp_path)
    assert out.startswith("wrote out.wav; replay: " + server.url)
    assert audio_of((tmp_path / "out.wav").read_bytes())[0] == 24000


def test_curl(server: LiveServer, tmp_path: Path) -> None:
    out = run(["bash", str(EXAMPLES / "curl.sh"), str(tmp_path)], server, tmp_path)
    assert re.search(r"(?i)^x-cast-url: " + re.escape(server.url), out, re.MULTILINE)
    assert '"progress":{"chunks_done"' in out and '"records":[' in out and '"voices"' in out
    assert audio_of((tmp_path / "hello.mp3").read_bytes())[1] > 0
    assert audio_of((tmp_path / "cast.wav").read_bytes())[1] > 0


def test_open_webui_settings(server: LiveServer) -> None:
    doc = (EXAMPLES / "open-webui.md").read_text()
    env = dict(re.findall(r"^ {4}(AUDIO_TTS_\w+)=(\S+)$", doc, flags=re.MULTILINE))
    assert env["AUDIO_TTS_ENGINE"] == "openai"
    base = env["AUDIO_TTS_OPENAI_API_BASE_URL"]
    assert base == f"{DEFAULT}/v1" and f"| API Base URL | `{base}`" in doc
    base = base.replace(DEFAULT, server.url)
    # Open WebUI lists models and voices without a key, then posts {input, voice, model}.
    models = [m["id"] for m in httpx.get(f"{base}/audio/models").json()["models"]]
    voices = [v["id"] for v in httpx.get(f"{base}/audio/voices").json()["voices"]]
    assert env["AUDIO_TTS_MODEL"] in models and env["AUDIO_TTS_VOICE"] in voices
    assert set(VOICES) <= set(voices)
    response = httpx.post(
        f"{base}/audio/speech",
        json={"input": "Open WebUI says hi.", "voice": env["AUDIO_TTS_VOICE"],
              "model": env["AUDIO_TTS_MODEL"]},
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=60,
    )  # fmt: skip
    response.raise_for_status()
    assert audio_of(response.content)[1] > 0
