"""The curl, openai SDK and Open WebUI examples of the README and of the manual's clients page
(docs/clients/index.md), run as written against a live server (only its address swapped for
the test server's)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest

from harness.servers import ROOT, LiveServer, start_server
from harness.workers import worker_process

pytestmark = pytest.mark.slow

PAGES = ("README.md", "docs/clients/index.md")
DEFAULT = "http://127.0.0.1:8000"
KEY = "sk-readme"


def block(page: str, language: str) -> str:
    text = (ROOT / page).read_text(encoding="utf-8")
    found = re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)
    assert len(found) == 1, f"expected one {language} block in {page}"
    return found[0]


class Target(NamedTuple):
    server: LiveServer
    key: str  # "" when the server is open

    @property
    def url(self) -> str:
        return self.server.url


@pytest.fixture(scope="module", params=["open", "keyed"])
def target(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Target]:
    data = tmp_path_factory.mktemp("readme") / "data"
    key = KEY if request.param == "keyed" else ""
    flags = ["--api-key", key] if key else []
    with (
        worker_process(data),
        start_server(["api", "--data-dir", str(data), *flags]) as server,
    ):
        yield Target(server, key)


def is_mp3(data: bytes) -> bool:
    return len(data) > 4 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0


@pytest.mark.parametrize("page", PAGES)
def test_curl_examples(target: Target, tmp_path: Path, page: str) -> None:
    script = block(page, "sh").replace(DEFAULT, target.url)
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, capture_output=True,
        text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "SPEECHD_API_KEY": target.key},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert is_mp3((tmp_path / "hello.mp3").read_bytes())
    assert (tmp_path / "hello.wav").read_bytes().startswith(b"RIFF")
    assert re.search(r"^x-cast-id: \S+", result.stdout, flags=re.MULTILINE | re.IGNORECASE)
    assert '"type":"speech.audio.done"' in result.stdout
    assert '"voices":[' in result.stdout


@pytest.mark.parametrize("page", PAGES)
def test_python_sdk_example(target: Target, tmp_path: Path, page: str) -> None:
    code = block(page, "python").replace(DEFAULT, target.url)
    if target.key:
        code = code.replace('api_key="unused"', f'api_key="{target.key}"')
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], cwd=tmp_path, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"replay: {target.url}/c/")
    assert is_mp3((tmp_path / "hello.mp3").read_bytes())
    assert (tmp_path / "longer.wav").read_bytes().startswith(b"RIFF")


@pytest.mark.parametrize("page", PAGES)
def test_open_webui_settings(target: Target, page: str) -> None:
    env = dict(
        line.split("=", 1) for line in block(page, "env").replace(DEFAULT, target.url).splitlines()
    )
    assert env["AUDIO_TTS_ENGINE"] == "openai"
    base, key = env["AUDIO_TTS_OPENAI_API_BASE_URL"], target.key or env["AUDIO_TTS_OPENAI_API_KEY"]
    # Open WebUI lists models and voices without a key, then posts {input, voice, model}.
    models = [m["id"] for m in httpx.get(f"{base}/audio/models").json()["models"]]
    voices = [v["id"] for v in httpx.get(f"{base}/audio/voices").json()["voices"]]
    assert env["AUDIO_TTS_MODEL"] in models and env["AUDIO_TTS_VOICE"] in voices
    response = httpx.post(
        f"{base}/audio/speech",
        json={"input": "Open WebUI says hi.", "voice": env["AUDIO_TTS_VOICE"],
              "model": env["AUDIO_TTS_MODEL"]},
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
        timeout=30,
    )  # fmt: skip
    response.raise_for_status()
    assert is_mp3(response.content)
