"""`POST /v1/audio/speech` and the discovery endpoints through the app, with the real worker
on the engine test double."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess

import pytest
from litestar.testing import AsyncTestClient

from harness.engines import VOICES, CostEngine, FakeChunkPolicy, chunked_text
from harness.workers import WORKER_ID, expected
from speechd import casts
from speechd.api.openai_compat._models import MODEL_NAMES
from speechd.casts import schema
from speechd.durable import Store


def decoded_seconds(data: bytes, fmt: str) -> float:
    raw = ["-f", "s16le", "-ar", "24000", "-ac", "1"] if fmt == "pcm" else []
    result = subprocess.run(
        ["ffmpeg", "-v", "error", *raw, "-i", "pipe:0", "-f", "s16le", "-ac", "1", "-ar", "24000",
         "pipe:1"],
        input=data, capture_output=True, check=True, timeout=60,
    )  # fmt: skip
    assert not result.stderr, result.stderr
    return len(result.stdout) / 2 / 24000


def planned_seconds(text: str) -> float:
    """The audio the engine double makes for `text` (at speed 1)."""
    engine = CostEngine()
    return sum(
        engine.audio_s(c.text, 1.0) for c in engine.plan(text, "af_heart", FakeChunkPolicy())
    )


def sse_events(text: str) -> list[dict[str, object]]:
    events = []
    for block in text.split("\n\n"):
        if block.strip():
            assert block.startswith("data: "), block
            events.append(json.loads(block.removeprefix("data: ")))
    return events


async def test_defaults_apply_when_the_sdk_omits_fields(client: AsyncTestClient) -> None:
    response = await client.post(
        "/v1/audio/speech",
        json={"input": "Just the input."},
        headers={"Accept": "application/octet-stream"},
    )
    assert response.status_code == 200
    assert response.headers["content-type"] == "audio/mpeg"
    cast_id = response.headers["x-cast-id"]
    assert casts.is_cast_id(cast_id)
    assert response.content == expected(cast_id, "Just the input.")
    assert response.headers["x-cast-url"] == f"http://testserver.local/c/{cast_id}"
    assert f'</c/{cast_id}>; rel="alternate"' in response.headers["link"]


@pytest.mark.parametrize(
    ("fmt", "media_type"),
    [
        ("mp3", "audio/mpeg"),
        ("wav", "audio/wav"),
        ("pcm", "audio/pcm"),
        ("flac", "audio/flac"),
        ("opus", "audio/ogg"),
        ("aac", "audio/aac"),
    ],
)
async def test_each_format_gets_its_content_type(
    client: AsyncTestClient, fmt: str, media_type: str
) -> None:
    text = chunked_text(3)
    response = await client.post(
        "/v1/audio/speech",
        json={"model": "tts-1", "input": text, "voice": "alloy", "response_format": fmt},
    )
    assert response.status_code == 200
    assert response.headers["content-type"] == media_type
    assert response.content == expected(response.headers["x-cast-id"], text, fmt)
    # One valid file of its format: ffmpeg decodes all three chunks' audio from it.
    seconds, planned = decoded_seconds(response.content, fmt), planned_seconds(text)
    assert planned - 0.001 <= seconds < planned + 0.2


async def test_stream_false_answers_the_whole_file_with_a_length(client: AsyncTestClient) -> None:
    response = await client.post(
        "/v1/audio/speech", json={"input": "Whole.", "voice": "af_bella", "stream": False}
    )
    assert response.status_code == 200
    assert int(response.headers["content-length"]) == len(response.content) > 0
    assert "transfer-encoding" not in response.headers


async def test_sse_sends_base64_deltas_then_done_with_usage(client: AsyncTestClient) -> None:
    text = chunked_text(4)
    response = await client.post(
        "/v1/audio/speech",
        json={"input": text, "voice": "alloy", "stream_format": "sse"},
        headers={"Accept": "application/octet-stream"},  # the SDK sends it even for SSE
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response.text)
    deltas, done = events[:-1], events[-1]
    assert [e["type"] for e in deltas] == ["speech.audio.delta"] * 4
    audio = b"".join(base64.b64decode(str(e["audio"])) for e in deltas)
    assert audio == expected(response.headers["x-cast-id"], text)
    assert done["type"] == "speech.audio.done"
    usage = done["usage"]
    assert isinstance(usage, dict)
    assert usage["input_tokens"] == len(text)
    assert usage["output_tokens"] == round(planned_seconds(text) * 1000) // 20
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


async def test_failure_before_audio_is_an_error_status(client: AsyncTestClient) -> None:
    # Every attempt fails on the first chunk: the worker retries, then ends the cast in error.
    text = "POISON from the start"
    for body in ({"input": text}, {"input": text, "stream_format": "sse"}):
        response = await client.post("/v1/audio/speech", json=body)
        assert response.status_code == 500
        assert response.json()["error"]["code"] == "cast_failed"


async def test_failure_mid_sse_ends_with_an_error_event(client: AsyncTestClient) -> None:
    # The first chunk is made; every attempt fails on the second (each new attempt repeats
    # the first chunk's record, which the reader must not send twice).
    text = "Fine start, POISON later"
    response = await client.post("/v1/audio/speech", json={"input": text, "stream_format": "sse"})
    assert response.status_code == 200
    events = sse_events(response.text)
    assert [e["type"] for e in events] == ["speech.audio.delta", "error"]
    error = events[-1]["error"]
    assert isinstance(error, dict)
    assert (error["type"], error["param"], error["code"]) == ("server_error", None, "cast_failed")
    assert error["message"].startswith("The cast could not be synthesized: ")
    assert error["message"].endswith("this chunk is poisoned")


async def test_identical_requests_and_model_aliases_share_one_cast(
    client: AsyncTestClient, store: Store
) -> None:
    ids = set()
    for model in MODEL_NAMES:
        for voice in ("af_heart", {"id": "af_heart"}):
            response = await client.post(
                "/v1/audio/speech",
                json={"model": model, "input": "Same text.", "voice": voice, "speed": 1},
            )
            assert response.status_code == 200
            ids.add(response.headers["x-cast-id"])
    assert len(ids) == 1
    assert await store.check_tail(schema.JOBS) == 1
    other = await client.post(
        "/v1/audio/speech", json={"input": "Same text.", "voice": "af_heart", "speed": 1.25}
    )
    assert other.headers["x-cast-id"] not in ids


async def test_instructions_are_accepted_and_ignored(client: AsyncTestClient) -> None:
    plain = await client.post("/v1/audio/speech", json={"input": "Hi.", "voice": "am_adam"})
    styled = await client.post(
        "/v1/audio/speech",
        json={"input": "Hi.", "voice": "am_adam", "instructions": "Whisper, like a pirate."},
    )
    assert styled.status_code == 200
    assert styled.headers["x-cast-id"] == plain.headers["x-cast-id"]


async def test_public_url_names_the_cast_link(client: AsyncTestClient) -> None:
    from litestar.testing import AsyncTestClient as Client

    from speechd.api.app import create_app
    from speechd.config import Settings

    settings = client.app.state.settings
    proxied = Settings(data_dir=settings.data_dir, public_url="https://tts.example.org/")
    async with Client(create_app(proxied)) as other:
        response = await other.post("/v1/audio/speech", json={"input": "Linked."})
    cast_id = response.headers["x-cast-id"]
    assert response.headers["x-cast-url"] == f"https://tts.example.org/c/{cast_id}"


async def test_model_lists(client: AsyncTestClient) -> None:
    models = (await client.get("/v1/models")).json()
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == list(MODEL_NAMES)
    assert all(m["object"] == "model" and isinstance(m["created"], int) for m in models["data"])
    one = (await client.get("/v1/models/tts-1-hd")).json()
    assert one["id"] == "tts-1-hd" and one["owned_by"] == "speechd"
    audio_models = (await client.get("/v1/audio/models")).json()
    assert audio_models == {"models": [{"id": name} for name in MODEL_NAMES]}


async def test_voice_list(client: AsyncTestClient) -> None:
    voices = (await client.get("/v1/audio/voices")).json()["voices"]
    assert [v["id"] for v in voices] == list(VOICES)
    assert {"id": "af_heart", "name": "Heart (American English, female)"} in voices


async def test_health_readiness_and_metrics(client: AsyncTestClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    assert (await client.get("/readyz")).json() == {
        "status": "ready",
        "model": "resident",
        "workers": [WORKER_ID],
        "devices": {
            WORKER_ID: {"device": "cpu", "name": "", "state": "resident", "max_batch": 1}
        },
    }
    text = chunked_text(3)
    await client.post("/v1/audio/speech", json={"input": text})
    await client.post("/v1/audio/speech", json={"input": text})
    # The worker commits its cursor just after the eos the responses waited for.
    for _ in range(100):
        response = await client.get("/metrics")
        if "speechd_queue_depth 0.0" in response.text:
            break
        await asyncio.sleep(0.05)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    for line in (
        'speechd_http_requests_total{method="POST",route="/v1/audio/speech",status="200"} 2.0',
        'speechd_casts_submitted_total{outcome="created"} 1.0',
        'speechd_casts_submitted_total{outcome="existing"} 1.0',
        "speechd_time_to_first_audio_seconds_count 2.0",
        "speechd_casts_completed_total 1.0",
        "speechd_chunks_generated_total 3.0",
        "speechd_queue_depth 0.0",
        "speechd_workers_ready 1.0",
        "speechd_active_casts 0.0",
    ):
        assert line in text, line
