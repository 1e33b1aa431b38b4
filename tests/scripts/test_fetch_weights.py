"""The README's test command (scripts/test.sh) on a fresh machine: the model tier's weights.

scripts/fetch_weights.py against a stand-in Hugging Face hub on localhost (HF_ENDPOINT; it
answers like the hub: small files directly, LFS files by a redirect that announces their
SHA-256 and size), against a hub that cannot be reached (a closed port: a real connection
failure), and scripts/test.sh itself stopping at once, in one line, when it has no weights."""

from __future__ import annotations

import hashlib
import http.server
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "fetch_weights.py"
PREFIX = "/hexgrad/Kokoro-82M/resolve/main/"
VOICES = "af_heart,am_adam"


class Hub(http.server.ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.files = {
            "config.json": b'{"n_token": 178}',
            "kokoro-v1_0.pth": os.urandom(3 << 20),
            "voices/af_heart.pt": os.urandom(4096),
            "voices/am_adam.pt": os.urandom(4096),
        }
        self.lies: set[str] = set()  # files whose announced SHA-256 is wrong
        self.requests: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Hub

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.server.requests.append(self.path)
        if self.path.startswith("/lfs/"):
            body = self.server.files[self.path[5:]]
            return self._answer(200, body)
        path = self.path.removeprefix(PREFIX)
        if not self.path.startswith(PREFIX) or path not in self.server.files:
            return self._answer(404, b"Entry not found")
        body = self.server.files[path]
        if path.endswith(".json"):
            return self._answer(200, body)
        sha = hashlib.sha256(b"other" if path in self.server.lies else body).hexdigest()
        self.send_response(302)
        self.send_header("Location", f"/lfs/{path}")
        self.send_header("X-Linked-Etag", f'"{sha}"')
        self.send_header("X-Linked-Size", str(len(body)))
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def hub() -> Iterator[Hub]:
    server = Hub()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nobody listens once it is closed


def fetch(folder: Path, endpoint: str, *more: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(folder), "--voices", VOICES, *more],
        capture_output=True,
        text=True,
        timeout=120,
        env={**environ, "HF_ENDPOINT": endpoint, **env},
    )


def test_a_reachable_hub_fills_the_folder_once(hub: Hub, tmp_path: Path) -> None:
    folder = tmp_path / "kokoro-82m"
    done = fetch(folder, hub.url)
    assert done.returncode == 0, done.stderr
    for path, body in hub.files.items():
        assert (folder / path).read_bytes() == body, path
    assert sorted(p.name for p in folder.rglob(".*part")) == []
    assert "Kokoro-82M" in (folder / "SOURCE.txt").read_text()
    asked = len(hub.requests)
    assert asked == 7  # config directly; the weights and two voices by redirect
    # A second run asks nothing, even with no hub at all.
    again = fetch(folder, f"http://127.0.0.1:{_closed_port()}")
    assert again.returncode == 0 and len(hub.requests) == asked


def test_only_what_is_missing_is_fetched(hub: Hub, tmp_path: Path) -> None:
    folder = tmp_path / "kokoro-82m"
    assert fetch(folder, hub.url).returncode == 0
    (folder / "voices" / "am_adam.pt").unlink()
    hub.requests.clear()
    assert fetch(folder, hub.url).returncode == 0
    assert hub.requests == [PREFIX + "voices/am_adam.pt", "/lfs/voices/am_adam.pt"]


def test_a_file_that_is_not_what_the_hub_announced_is_not_kept(hub: Hub, tmp_path: Path) -> None:
    hub.lies.add("kokoro-v1_0.pth")
    folder = tmp_path / "kokoro-82m"
    done = fetch(folder, hub.url)
    assert done.returncode == 1
    assert "kokoro-v1_0.pth: SHA-256" in done.stderr
    assert not (folder / "kokoro-v1_0.pth").exists()
    assert list(folder.glob(".*part")) == []


def test_a_voice_the_hub_lacks_is_an_error_naming_it(hub: Hub, tmp_path: Path) -> None:
    done = fetch(tmp_path / "m", hub.url, "--voices", "af_heart,zf_nobody")
    assert done.returncode == 1 and "voices/zf_nobody.pt" in done.stderr and "404" in done.stderr


def test_an_unreachable_hub_stops_at_once_in_one_line(tmp_path: Path) -> None:
    done = fetch(tmp_path / "m", f"http://127.0.0.1:{_closed_port()}")
    assert done.returncode == 2
    line = done.stderr.strip()
    assert "\n" not in line and "cannot be reached" in line
    assert "SPEECHD_TEST_MODEL_DIR" in line and "HF_ENDPOINT" in line
    offline = fetch(tmp_path / "m", "http://127.0.0.1:9", HF_HUB_OFFLINE="1")
    assert offline.returncode == 2 and "HF_HUB_OFFLINE is set" in offline.stderr


def test_the_test_command_stops_before_installing_anything(tmp_path: Path) -> None:
    # A copy of the repository's scripts with nothing beside it: no ../shared/kokoro-weights.
    repo = tmp_path / "fresh" / "speechd"
    (repo / "scripts").mkdir(parents=True)
    for name in ("test.sh", "_weights.sh", "fetch_weights.py"):
        shutil.copy(ROOT / "scripts" / name, repo / "scripts" / name)
    environ = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SPEECHD_TEST_MODEL_DIR", "SPEECHD_KOKORO_WEIGHTS", "HF_HUB_OFFLINE")
    }
    done = subprocess.run(
        ["bash", str(repo / "scripts" / "test.sh")],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **environ,
            "SPEECHD_CACHE": str(tmp_path / "cache"),
            "HF_ENDPOINT": f"http://127.0.0.1:{_closed_port()}",
        },
    )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "SPEECHD_TEST_MODEL_DIR" in done.stderr
    assert not (repo / ".venv").exists()  # it stopped before the virtual environment
    given = subprocess.run(
        ["bash", str(repo / "scripts" / "test.sh")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**environ, "SPEECHD_TEST_MODEL_DIR": str(tmp_path / "nowhere")},
    )
    assert given.returncode == 1 and "has no config.json" in given.stderr
    assert given.stderr.startswith(str(repo / "scripts" / "test.sh"))
    assert not (repo / ".venv").exists()


def test_the_real_hub_unreachable_from_here_is_the_same_one_line(tmp_path: Path) -> None:
    try:
        socket.getaddrinfo("huggingface.co", 443)
    except OSError:
        pass
    else:
        pytest.skip("huggingface.co resolves here: this checks a machine that cannot reach it")
    environ = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_ENDPOINT")}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "m")],
        capture_output=True,
        text=True,
        timeout=120,
        env=environ,
    )
    assert done.returncode == 2
    assert "https://huggingface.co cannot be reached" in done.stderr
    assert done.stderr.count("\n") == 1
