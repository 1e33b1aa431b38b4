"""The cpu image as a user runs it: `podman run` with a store volume and a model cache volume
that holds the weights, the port published, and everything through that port; and the
torch-free onnx image on the same model cache volume, speaking from the export found there.

The openai SDK's speech is heard back by the offline recogniser; `/readyz` turns ready and the
image's own HEALTHCHECK passes; SIGTERM (what `podman stop` and `docker stop` send) drains a
response in flight to its end and leaves a cast still being made to finish after a restart
on the same volumes, where the earlier cast replays by its link, byte for byte.
"""

from __future__ import annotations

import io
import threading
import time
import wave
from collections.abc import Callable, Iterator

import httpx
import pytest
from openai import OpenAI

from harness.podman import CPU_IMAGE, ONNX_IMAGE, ROOT, Container, Podman, wait_ready
from harness.speech import recall, transcribe_pcm16

from ._figures import record

pytestmark = [pytest.mark.container]

SENTENCE = "My sister bought a red bicycle at the market near the train station yesterday."
STREAMED = SENTENCE + " She rode it home along the river before the rain began."
LONGER = (
    "The lighthouse keeper climbed the stairs every evening at dusk. He wiped the great lens "
    "clean, trimmed the wick, and watched the ships pass the rocks below. In the winter the "
    "storms came in from the west, and the waves broke over the lower windows. Still the light "
    "burned all night, and in the morning he wrote the weather in his book. His daughter "
    "rowed out on calm days with bread, apples and the newspaper, and together they read the "
    "shipping news aloud before she went home across the bay."
)
READY_S = 600.0  # a failsafe far above the ~30 s a start takes here with the weights in place
DRAIN_S = 120.0  # ditto, for a drain (the response in flight is a few seconds of audio)


def _pcm(wav: bytes) -> tuple[bytes, int]:
    with wave.open(io.BytesIO(wav)) as file:
        return file.readframes(file.getnframes()), file.getframerate()


@pytest.fixture(scope="module")
def served(
    podman: Podman,
    cpu_image: str,
    models_volume: Callable[[str], str],
    run_id: str,
) -> Iterator[Container]:
    models = models_volume("cpu")
    store = podman.volume(f"speechd-test-store-{run_id}")
    started = time.monotonic()
    container = podman.start(
        f"speechd-test-cpu-{run_id}",
        cpu_image,
        volumes=[f"{store}:/var/lib/speechd", f"{models}:/var/cache/speechd"],
    )
    try:
        wait_ready(container.url, READY_S, container)
        record("cpu", "run to ready (weights in the volume)", f"{time.monotonic() - started:.1f} s")
        time.sleep(2)  # let the warm-up's allocations settle before reading idle memory
        record("cpu", "RSS idle (all processes)", f"{container.rss_bytes() / 2**20:.0f} MiB")
        yield container
    finally:
        container.remove()
        podman("volume", "rm", "-f", store, check=False)


def test_readyz_and_the_image_health_check(served: Container, podman: Podman) -> None:
    body = httpx.get(served.url + "/readyz", timeout=10).json()
    (device,) = body["devices"].values()
    assert device["device"] == "cpu"
    # The image's HEALTHCHECK, run as the engine runs it (podman has no systemd timer here).
    assert podman("healthcheck", "run", served.name, check=False).returncode == 0
    # Non-root, and nothing of the build's CA bundle left behind.
    assert podman("exec", served.name, "id", "-u").stdout.strip() == "1000"
    assert "PIP_CERT" not in podman("exec", served.name, "env").stdout
    history = podman("history", "--no-trunc", "--format", "{{.CreatedBy}}", CPU_IMAGE).stdout
    assert "BEGIN CERTIFICATE" not in history
    assert not any(arg in history for arg in ("PIP_CERT=/etc", "host-ca", "host-wheels"))
    leftovers = podman("exec", served.name, "ls", "-A", "/run/secrets", "/tmp", check=False)
    assert "pip-cert" not in leftovers.stdout and "torch" not in leftovers.stdout


def test_the_openai_sdk_gets_intelligible_speech(served: Container) -> None:
    client = OpenAI(base_url=served.url + "/v1", api_key="unused", timeout=300)
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], served.rss_bytes())
            done.wait(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        speech = client.audio.speech.create(
            model="tts-1", voice="af_heart", input=SENTENCE, response_format="wav"
        )
    finally:
        done.set()
        sampler.join()
    pcm, rate = _pcm(speech.content)
    assert 2.0 < len(pcm) / 2 / rate < 10.0
    assert recall(SENTENCE, transcribe_pcm16(pcm, rate)) >= 0.7  # noise scores near 0
    assert speech.response.headers["X-Cast-Url"].startswith(served.url + "/c/")
    record("cpu", "RSS serving one request (peak, all processes)", f"{peak[0] / 2**20:.0f} MiB")


def test_sigterm_drains_and_a_restart_on_the_same_volumes_replays_and_finishes(
    podman: Podman,
    cpu_image: str,
    models_volume: Callable[[str], str],
    volume: Callable[[str], str],
    run_id: str,
) -> None:
    models = models_volume("cpu")
    store = volume("drain-store")
    mounts = [f"{store}:/var/lib/speechd", f"{models}:/var/cache/speechd"]
    first = podman.start(f"speechd-test-drain-{run_id}", cpu_image, volumes=mounts)
    try:
        wait_ready(first.url, READY_S, first)
        url = first.url
        # A response in flight, and a cast left to the worker (nobody listening).
        heard = bytearray()
        headers: dict[str, str] = {}
        first_bytes = threading.Event()
        finished = threading.Event()

        def listen() -> None:
            body = {"input": STREAMED, "voice": "af_heart", "response_format": "wav"}
            with httpx.stream(
                "POST", url + "/v1/audio/speech", json=body, timeout=DRAIN_S
            ) as response:
                headers.update(response.headers)
                for piece in response.iter_bytes():
                    heard.extend(piece)
                    first_bytes.set()
            finished.set()

        listener = threading.Thread(target=listen, daemon=True)
        listener.start()
        assert first_bytes.wait(DRAIN_S), first.logs()[-2000:]
        queued = httpx.post(
            url + "/v1/casts",
            json={"input": LONGER, "voice": "am_adam", "response_format": "wav"},
            timeout=30,
        ).json()
        before = httpx.get(f"{url}/v1/casts/{queued['id']}", timeout=30).json()
        first.signal("TERM")
        listener.join(DRAIN_S)
        assert finished.is_set(), "the response in flight was cut"
        assert first.wait(DRAIN_S) == 0, first.logs()[-2000:]
        pcm, rate = _pcm(bytes(heard))
        assert recall(STREAMED, transcribe_pcm16(pcm, rate)) >= 0.7  # noise scores near 0

        first.remove()
        second = podman.start(f"speechd-test-drain-{run_id}", cpu_image, volumes=mounts)
        wait_ready(second.url, READY_S, second)
        url = second.url
        # The cast answered during the drain, by its link: the same audio (a streamed wav
        # says "length unknown" where the finished file has its sizes).
        cast_id = headers["x-cast-id"]
        replay = httpx.get(f"{url}/v1/casts/{cast_id}/audio", timeout=60)
        assert replay.status_code == 200 and _pcm(replay.content) == (pcm, rate)
        # The cast the worker had not finished resumes, and its file is whole speech.
        deadline = time.monotonic() + READY_S
        while (status := httpx.get(f"{url}/v1/casts/{queued['id']}", timeout=30).json())[
            "status"
        ] != "done":
            assert status["status"] != "failed" and time.monotonic() < deadline, status
            time.sleep(1)
        audio = httpx.get(f"{url}/v1/casts/{queued['id']}/audio", timeout=60)
        assert audio.status_code == 200
        pcm, rate = _pcm(audio.content)
        assert recall(LONGER, transcribe_pcm16(pcm, rate)) >= 0.7
        assert before["status"] in ("queued", "loading", "generating"), before  # cut by the stop
    finally:
        first.remove()
        podman("rm", "-f", "--ignore", f"speechd-test-drain-{run_id}", check=False)


def test_the_torch_free_image_speaks_from_the_export_in_the_cache_volume(
    served: Container,  # its start left the ONNX export in the cpu volume, if it was not there
    podman: Podman,
    models_volume: Callable[[str], str],
    volume: Callable[[str], str],
    run_id: str,
) -> None:
    seconds = podman.build(ROOT / "containers" / "onnx" / "Containerfile", ONNX_IMAGE)
    record("onnx", "build (cached layers where there were some)", f"{seconds:.1f} s")
    record("onnx", "image size", f"{podman.size(ONNX_IMAGE) / 1e9:.2f} GB")
    record("cpu", "image size", f"{podman.size(CPU_IMAGE) / 1e9:.2f} GB")
    lacks = "import importlib.util as u, sys; sys.exit(any(map(u.find_spec, sys.argv[1:])))"
    absent = podman("run", "--rm", "--entrypoint", "python3", ONNX_IMAGE, "-c", lacks,
                    "torch", "kokoro", "transformers", check=False)  # fmt: skip
    assert absent.returncode == 0, absent.stderr
    started = time.monotonic()
    container = podman.start(
        f"speechd-test-onnx-{run_id}",
        ONNX_IMAGE,
        volumes=[
            f"{volume('onnx-store')}:/var/lib/speechd",
            f"{models_volume('cpu')}:/var/cache/speechd",
        ],
    )
    try:
        wait_ready(container.url, READY_S, container)
        record("onnx", "run to ready (export in the volume)", f"{time.monotonic() - started:.1f} s")
        record("onnx", "RSS idle (all processes)", f"{container.rss_bytes() / 2**20:.0f} MiB")
        client = OpenAI(base_url=container.url + "/v1", api_key="unused", timeout=300)
        speech = client.audio.speech.create(
            model="tts-1", voice="af_heart", input=SENTENCE, response_format="wav"
        )
        pcm, rate = _pcm(speech.content)
        assert recall(SENTENCE, transcribe_pcm16(pcm, rate)) >= 0.7  # noise scores near 0
    finally:
        container.remove()
