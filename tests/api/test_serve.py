"""`speechd serve` for real: the api, the supervised worker with the Kokoro-82M weights and
the embedded store in one process tree, driven by the openai package."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from harness.servers import LiveServer, start_server
from speechd.casts import schema
from speechd.durable import EmbeddedStore
from tests.support.devices import DEVICE

pytestmark = [pytest.mark.model, pytest.mark.slow]

MODEL_DIR = Path(
    os.environ.get("SPEECHD_TEST_MODEL_DIR", Path.home() / ".cache/speechd/kokoro-82m")
)


def serve_args(data: Path) -> list[str]:
    return ["serve", "--data-dir", str(data), "--model-dir", str(MODEL_DIR), "--device", DEVICE]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("serve") / "data"


@pytest.fixture(scope="module")
def served(data_dir: Path) -> Iterator[LiveServer]:
    with start_server(serve_args(data_dir), timeout=240) as server:
        yield server


def decoded_seconds(data: bytes) -> float:
    pcm = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", "pipe:0", "-f", "s16le", "-ac", "1", "-ar", "24000",
         "pipe:1"],
        input=data, capture_output=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    return len(pcm) / 2 / 24000


def test_the_sdk_gets_speech_from_the_real_model(served: LiveServer) -> None:
    with openai.OpenAI(base_url=served.v1, api_key="unused", max_retries=0, timeout=120) as client:
        voices = [v["id"] for v in httpx.get(served.v1 + "/audio/voices").json()["voices"]]
        assert "af_heart" in voices
        speech = client.audio.speech.create(
            model="tts-1", voice="af_heart", input="The quick brown fox jumps over the lazy dog."
        )
        assert 1.5 < decoded_seconds(speech.content) < 8
        with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy",
            input="First a short clause, then a longer sentence that takes a while to say.",
        ) as response:  # fmt: skip
            chunks = response.iter_bytes()
            first_at = time.time()
            body = next(chunks)
            body += b"".join(chunks)
            done_at = time.time()
        assert decoded_seconds(body) > 2
        assert done_at - first_at > 0.1  # the first bytes came before the cast ended
    metrics = httpx.get(served.url + "/metrics").text
    assert "speechd_casts_completed_total 2.0" in metrics
    assert "speechd_worker_alive 1.0" in metrics


def test_sigterm_mid_cast_exits_0_and_the_next_start_finishes_the_cast(data_dir: Path) -> None:
    text = " ".join(["This cast is interrupted by a shutdown and finished by the next start."] * 6)
    with start_server(serve_args(data_dir), timeout=240) as server:
        with httpx.stream(
            "POST", server.v1 + "/audio/speech", json={"input": text, "voice": "am_adam"},
            timeout=120,
        ) as response:  # fmt: skip
            cast_id = response.headers["x-cast-id"]
            next(response.iter_raw())
            server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(60) == 0

    async def check_well_formed() -> None:
        store = await EmbeddedStore.open(data_dir)
        try:
            records = (await store.read(schema.cast_stream(cast_id), 0)).records
            assert schema.event_of(records[0]) == schema.Event.META
            assert all(schema.event_of(r) in set(schema.Event) for r in records)
        finally:
            await store.close()

    asyncio.run(check_well_formed())
    with start_server(serve_args(data_dir), timeout=240) as server:
        again = httpx.post(
            server.v1 + "/audio/speech", json={"input": text, "voice": "am_adam"}, timeout=300
        )
        assert again.status_code == 200 and again.headers["x-cast-id"] == cast_id
        assert decoded_seconds(again.content) > 10
