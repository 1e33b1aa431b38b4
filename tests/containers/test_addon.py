"""The Home Assistant add-on as the Supervisor runs it: its image built on the cpu image
(`BUILD_FROM`), its options in /data/options.json, /share mounted (here holding the weights,
named by the `model_dir` option), `SUPERVISOR_TOKEN` in the environment and the host name
`supervisor` pointing at a stand-in that records the discovery. A Wyoming client gets speech
from the published port, in the voice the options chose."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from wyoming.client import AsyncTcpClient
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize

import speechd
from harness.podman import ADDON_IMAGE, ROOT, Container, Podman, wait_ready
from harness.speech import recall, transcribe_pcm16
from tests.wyoming._support import hear

from ._figures import record

pytestmark = [pytest.mark.container]

ADDON = ROOT / "containers" / "homeassistant"
SENTENCE = "My sister bought a red bicycle at the market near the train station yesterday."
READY_S = 600.0  # failsafes far above what a start and a sentence take here
READ_S = 300.0
TOKEN = "supervisor-token-for-the-test"
KEY = "key-for-the-test"
#: The Supervisor's discovery endpoint, as a stand-in: it prints what it is sent.
SUPERVISOR = """
import http.server, json
class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        print(json.dumps({"path": self.path, "auth": self.headers["Authorization"],
                          "body": json.loads(body)}), flush=True)
        self.send_response(200); self.send_header("Content-Type", "application/json")
        self.end_headers(); self.wfile.write(b'{"result": "ok", "data": {"uuid": "x"}}')
http.server.HTTPServer(("0.0.0.0", 80), Handler).serve_forever()
"""


@pytest.fixture(scope="module")
def addon_image(podman: Podman, cpu_image: str) -> str:
    seconds = podman.build(
        ADDON / "Dockerfile", ADDON_IMAGE, ADDON, args={"BUILD_FROM": cpu_image}, pip=False
    )
    record("addon", "build on the cpu image", f"{seconds:.1f} s")
    return ADDON_IMAGE


@pytest.fixture(scope="module")
def addon(
    podman: Podman,
    addon_image: str,
    cpu_image: str,
    model_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
    run_id: str,
) -> Iterator[tuple[Container, Container]]:
    supervisor = podman.start(
        f"speechd-test-supervisor-{run_id}",
        cpu_image,
        "-c",
        SUPERVISOR,
        ports=(),
        extra=["--user", "root", "--entrypoint", "python3"],
    )
    data = tmp_path_factory.mktemp("addon-data")
    options = {
        "voice": "am_adam",
        "engine": "auto",
        "log_level": "info",
        "api_keys": [KEY],
        "model_dir": "/share/kokoro-82m",
    }
    (data / "options.json").write_text(json.dumps(options))
    address = podman(
        "inspect", supervisor.name, "--format", "{{.NetworkSettings.IPAddress}}"
    ).stdout.strip()
    container = podman.start(
        f"speechd-test-addon-{run_id}",
        addon_image,
        volumes=[f"{data}:/data", f"{model_dir}:/share/kokoro-82m:ro"],
        env={"SUPERVISOR_TOKEN": TOKEN},
        ports=(8000, 10200),
        extra=["--add-host", f"supervisor:{address}"],
    )
    try:
        wait_ready(container.url, READY_S, container)
        yield container, supervisor
    finally:
        container.remove()
        supervisor.remove()


def test_the_options_are_flags_and_the_supervisor_hears_of_the_wyoming_server(
    addon: tuple[Container, Container],
) -> None:
    container, supervisor = addon
    log = container.logs()
    assert "--default-voice am_adam" in log and "--model-dir /share/kokoro-82m" in log
    assert "--api-key ***" in log and KEY not in log
    # The api asks for the key the options gave.
    body = {"input": "Hello.", "voice": "af_heart"}
    assert httpx.post(container.url + "/v1/audio/speech", json=body, timeout=30).status_code == 401
    (sent,) = [json.loads(line) for line in supervisor.logs().splitlines() if "path" in line]
    hostname = container.podman("exec", container.name, "hostname").stdout.strip()
    assert sent == {
        "path": "/discovery",
        "auth": f"Bearer {TOKEN}",
        "body": {"service": "wyoming", "config": {"uri": f"tcp://{hostname}:10200"}},
    }


async def test_a_wyoming_client_gets_speech_in_the_voice_of_the_options(
    addon: tuple[Container, Container],
) -> None:
    container, _ = addon
    port = container.port(10200)
    async with AsyncTcpClient("127.0.0.1", port) as client:
        await client.write_event(Describe().event())
        info = Info.from_event(await asyncio.wait_for(client.read_event(), READ_S))
    assert info.tts[0].version == speechd.__version__
    async with AsyncTcpClient("127.0.0.1", port) as client:
        await client.write_event(Synthesize(text=SENTENCE).event())
        heard = await hear(client, read_s=READ_S)
    assert heard.kinds[0] == "audio-start" and heard.kinds[-1] == "audio-stop"
    assert recall(SENTENCE, transcribe_pcm16(heard.audio, heard.start.rate)) >= 0.7
    cast = heard.of("audio-start")[0].data["cast_id"]
    async with httpx.AsyncClient(timeout=30) as http:
        status = (await http.get(f"{container.url}/v1/casts/{cast}")).json()
    assert status["voice"] == "am_adam"
