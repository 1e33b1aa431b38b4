"""The cuda image, built only when asked (SPEECHD_TEST_CUDA_IMAGE=1: its CUDA wheels are several
GB and a cold build takes ~10 minutes here), run on this machine's CPU: `--device auto` falls
back and says so, the openai SDK gets intelligible speech, and scripts/gpu_check.sh runs inside
it unchanged (`--device cpu --quick --skip-tests`, the GPU check's dry run) from a copy of
the checkout."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from harness.podman import CUDA_IMAGE, ROOT, Container, Podman, ca_bundle, wait_ready
from harness.speech import recall, transcribe_pcm16

from ._figures import record

pytestmark = [
    pytest.mark.container,
    pytest.mark.skipif(
        not os.environ.get("SPEECHD_TEST_CUDA_IMAGE"),
        reason="the cuda image is several GB: SPEECHD_TEST_CUDA_IMAGE=1 builds and runs it",
    ),
]

SENTENCE = "My sister bought a red bicycle at the market near the train station yesterday."
READY_S = 600.0  # failsafes far above a start (~35 s here) and a GPU check dry run (~10 min)
CHECK_S = 2400.0
LEFT_OUT = shutil.ignore_patterns(
    ".git", ".venv*", "build", "dist", "__pycache__", "*.egg-info", "test-artifacts", ".*_cache"
)


@pytest.fixture(scope="module")
def cuda_image(podman: Podman, cpu_image: str) -> str:  # after the cpu image: one build at once
    seconds = podman.build(ROOT / "containers" / "cuda" / "Containerfile", CUDA_IMAGE)
    record("cuda", "build (cached layers where there were some)", f"{seconds:.1f} s")
    record("cuda", "image size", f"{podman.size(CUDA_IMAGE) / 1e9:.2f} GB")
    return CUDA_IMAGE


@pytest.fixture(scope="module")
def served(
    podman: Podman, cuda_image: str, models_volume: Callable[[str], str], run_id: str
) -> Iterator[Container]:
    models = models_volume("cuda")
    store = podman.volume(f"speechd-test-cuda-store-{run_id}")
    started = time.monotonic()
    container = podman.start(
        f"speechd-test-cuda-{run_id}",
        cuda_image,
        volumes=[f"{store}:/var/lib/speechd", f"{models}:/var/cache/speechd"],
    )
    try:
        wait_ready(container.url, READY_S, container)
        record("cuda", "run to ready on the CPU", f"{time.monotonic() - started:.1f} s")
        record("cuda", "RSS idle (all processes)", f"{container.rss_bytes() / 2**20:.0f} MiB")
        yield container
    finally:
        container.remove()
        podman("volume", "rm", "-f", store, check=False)


def test_device_auto_falls_back_to_the_cpu_says_so_and_speaks(served: Container) -> None:
    said = [line for line in served.logs().splitlines() if "device auto:" in line]
    assert said and "speaking on the CPU" in said[0], served.logs()[-3000:]
    (device,) = httpx.get(served.url + "/readyz", timeout=10).json()["devices"].values()
    assert device["device"] == "cpu"
    client = OpenAI(base_url=served.url + "/v1", api_key="unused", timeout=300)
    speech = client.audio.speech.create(
        model="tts-1", voice="af_heart", input=SENTENCE, response_format="pcm"
    )
    assert recall(SENTENCE, transcribe_pcm16(speech.content, 24_000)) >= 0.7


def test_the_gpu_check_runs_in_it_unchanged(
    podman: Podman, cuda_image: str, model_dir: Path, tmp_path: Path
) -> None:
    checkout = tmp_path / "speechd"
    shutil.copytree(ROOT, checkout, ignore=LEFT_OUT)
    command = ["run", "--rm", "--user", "root", "--entrypoint", "bash", "-w", "/src"]
    command += ["-v", f"{checkout}:/src", "-v", f"{model_dir}:/weights:ro"]
    command += ["-e", "SPEECHD_TEST_MODEL_DIR=/weights"]
    ca = ca_bundle()
    if ca is not None:  # pip inside installs the test extra from PyPI
        command += ["-v", f"{ca}:/etc/ssl/host-ca.crt:ro", "-e", "PIP_CERT=/etc/ssl/host-ca.crt"]
    started = time.monotonic()
    done = podman(
        *command,
        cuda_image,
        "scripts/gpu_check.sh",
        "--device",
        "cpu",
        "--quick",
        "--skip-tests",  # the model tier runs in the image's own tests, not here
        timeout=CHECK_S,
        check=False,
    )
    took = f"{time.monotonic() - started:.0f} s"
    record("cuda", "scripts/gpu_check.sh --device cpu --quick --skip-tests", took)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    # It ran on the image's torch (its virtual environment sees it), not one it fetched.
    venv = checkout / ".venv-gpu"
    assert "include-system-site-packages = true" in (venv / "pyvenv.cfg").read_text()
    assert not list(venv.glob("lib/python3*/site-packages/torch"))
