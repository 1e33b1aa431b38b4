"""compose.yaml's `openwebui` profile, run only when asked (SPEECHD_TEST_OPENWEBUI=1): Open
WebUI's image cannot be pulled here, so a stand-in is built from its PyPI package (several GB
of dependencies: the CPU torch is installed first so pip does not fetch a CUDA one) and tagged
with the name compose.yaml uses. Open WebUI, set up by nothing but compose.yaml's environment,
lists speechd's voices and reads a text aloud through speechd: its own speech route answers
with audio the offline recogniser understands."""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable, Iterator

import av
import httpx
import numpy as np
import pytest

from harness.nats import free_port
from harness.podman import ROOT, Podman, torch_version, wait_ready
from harness.speech import recall, transcribe_pcm16

from .test_compose import Compose

pytestmark = [
    pytest.mark.container,
    pytest.mark.skipif(
        not os.environ.get("SPEECHD_TEST_OPENWEBUI"),
        reason="Open WebUI's stand-in image is several GB: SPEECHD_TEST_OPENWEBUI=1 builds it",
    ),
]

OPENWEBUI_IMAGE = "ghcr.io/open-webui/open-webui:main"  # compose.yaml's
OPENWEBUI_VERSION = "0.12.4"
SENTENCE = "My sister bought a red bicycle at the market near the train station yesterday."
UP_S = 1200.0  # failsafes: Open WebUI's first start migrates its database and loads a lot
#: The stand-in: Open WebUI's PyPI package as its image runs it (port 8080, data in
#: /app/backend/data); sign-in off, as a single-user install has it, so the test can sign in.
STAND_IN = f"""\
FROM scratch AS torch-wheels
FROM docker.io/library/debian:bookworm-slim
ARG TORCH_VERSION={torch_version(ROOT / "containers" / "cpu" / "Containerfile")}
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
      python3 python3-pip ca-certificates \\
 && rm -rf /var/lib/apt/lists/*
RUN --mount=type=secret,id=pip-cert \\
    --mount=type=bind,from=torch-wheels,target=/tmp/torch-wheels \\
    [ ! -s /run/secrets/pip-cert ] || export PIP_CERT=/run/secrets/pip-cert; \\
    pip install --no-cache-dir --break-system-packages --find-links /tmp/torch-wheels \\
      "torch==${{TORCH_VERSION}}+cpu" \\
 && pip install --no-cache-dir --break-system-packages open-webui=={OPENWEBUI_VERSION}
ENV DATA_DIR=/app/backend/data WEBUI_AUTH=False OFFLINE_MODE=true HF_HUB_OFFLINE=1
EXPOSE 8080
CMD ["open-webui", "serve", "--host", "0.0.0.0", "--port", "8080"]
"""


@pytest.fixture(scope="module")
def openwebui_image(podman: Podman, tmp_path_factory: pytest.TempPathFactory) -> str:
    context = tmp_path_factory.mktemp("openwebui-image")
    (context / "Containerfile").write_text(STAND_IN)
    # torch's CPU wheel from the folder the cpu image takes it from (pip's find-links here).
    podman.build(context / "Containerfile", OPENWEBUI_IMAGE, context, timeout=3600)
    return OPENWEBUI_IMAGE


@pytest.fixture
def compose(
    podman: Podman,
    cpu_image: str,
    openwebui_image: str,
    models_volume: Callable[[str], str],
    run_id: str,
) -> Iterator[tuple[Compose, str]]:
    port, webui = free_port(), free_port()
    env = {
        "HTTP_PORT": str(port),
        "OPENWEBUI_PORT": str(webui),
        "WYOMING_PORT": str(free_port()),
        "MODEL_CACHE": models_volume("openwebui"),
        "SPEECHD_IMAGE": cpu_image,
    }
    tool = Compose(podman, f"speechd-test-webui-{run_id}", env, f"http://127.0.0.1:{port}")
    try:
        yield tool, f"http://127.0.0.1:{webui}"
    finally:
        tool.down()


def _pcm(mp3: bytes) -> bytes:
    with av.open(io.BytesIO(mp3)) as container:
        resampler = av.AudioResampler(format="s16", layout="mono", rate=24_000)
        frames = [
            out.to_ndarray()
            for frame in container.decode(audio=0)
            for out in resampler.resample(frame)
        ]
    return np.concatenate(frames, axis=1).astype("<i2").tobytes()


def test_open_webui_lists_speechd_s_voices_and_reads_aloud_through_it(
    compose: tuple[Compose, str],
) -> None:
    tool, webui = compose
    tool("--profile", "openwebui", "up", "-d")
    wait_ready(tool.url, UP_S)
    deadline = time.monotonic() + UP_S
    while True:
        try:
            if httpx.get(webui + "/health", timeout=10).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "Open WebUI never answered /health"
        time.sleep(2)
    signin = {"email": "admin@localhost", "password": "admin"}
    token = httpx.post(webui + "/api/v1/auths/signin", json=signin, timeout=60).json()["token"]
    auth = {"Authorization": f"Bearer {token}"}
    voices = httpx.get(webui + "/api/v1/audio/voices", headers=auth, timeout=60).json()
    ids = {voice["id"] for voice in voices["voices"]}
    assert {"af_heart", "am_adam"} <= ids  # speechd's list, not OpenAI's defaults
    spoken = httpx.post(
        webui + "/api/v1/audio/speech",
        headers=auth,
        json={"input": SENTENCE, "voice": "af_heart", "model": "tts-1"},
        timeout=600,
    )
    assert spoken.status_code == 200, spoken.text[:500]
    assert recall(SENTENCE, transcribe_pcm16(_pcm(spoken.content), 24_000)) >= 0.7
