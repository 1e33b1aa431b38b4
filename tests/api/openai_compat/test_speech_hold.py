"""The start hold through the api: a device slower than real time (the engine test double at
twice real time, in its own worker process, behind a live `speechd api`) holds a streamed
response back as long as its cast needs to play through, says so in `X-Cast-Start-Delay` and
in the cast's status; `start: "now"` (or `--start now`) sends the first audio at once. On a
fast device nothing is held (the fast tier)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from litestar.testing import AsyncTestClient

from harness.engines import chunked_text
from harness.servers import start_server
from harness.workers import worker_process
from loadtest._listener import PCM_BYTES_PER_S, Listener
from tests.clients._support import run_cli

SLOW = {"rtf": 2.0, "overhead_s": 0.02, "audio_per_char": 0.004}
HEADER = "x-cast-start-delay"


async def test_a_fast_device_starts_at_once(client: AsyncTestClient) -> None:
    body = {"input": chunked_text(5), "response_format": "pcm"}
    response = await client.post("/v1/audio/speech", json=body)
    assert response.status_code == 200 and response.headers[HEADER] == "0.0"
    view = (await client.get(f"/v1/casts/{response.headers['x-cast-id']}")).json()
    assert view["progress"]["hold_seconds"] == 0.0
    assert view["progress"]["plays_in_seconds"] is None


async def test_start_takes_smooth_or_now(client: AsyncTestClient) -> None:
    body = {"input": "Hello there.", "response_format": "pcm", "start": "later"}
    response = await client.post("/v1/audio/speech", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "start"
    now = await client.post("/v1/audio/speech", json={**body, "start": "now"})
    assert now.status_code == 200 and now.headers[HEADER] == "0.0"


def listen(url: str, text: str, **extra: str) -> tuple[float, Listener, str, float]:
    """Stream `text` as pcm; (the stated delay, the listener, the cast id, headers to first
    byte)."""
    body = {"input": text, "response_format": "pcm", **extra}
    with httpx.stream("POST", url + "/v1/audio/speech", json=body, timeout=120) as response:
        assert response.status_code == 200, response.read()
        headers_at = time.monotonic()
        delay = float(response.headers[HEADER])
        listener = Listener(submitted=headers_at)
        for piece in response.iter_raw():
            listener.receive(time.monotonic(), len(piece) / PCM_BYTES_PER_S)
        listener.end(time.monotonic())
    assert listener.first is not None
    return delay, listener, response.headers["x-cast-id"], listener.first - headers_at


@pytest.mark.slow
def test_a_slow_device_holds_the_stream_until_it_plays_through(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with (
        worker_process(data, **SLOW),
        start_server(["api", "--data-dir", str(data)]) as server,
    ):
        delay, held, cast_id, waited = listen(server.url, chunked_text(8))
        assert delay > 0.5
        assert waited >= delay - 0.1  # the bytes were held back as stated
        view = httpx.get(f"{server.v1}/casts/{cast_id}").json()
        assert view["progress"]["hold_seconds"] > 0.5
        said = run_cli(
            "say", "-o", "-", "--format", "pcm", chunked_text(8) + " cli", url=server.url
        )
        assert said.code == 0 and said.stdout, said.stderr
        assert "plays without a stall" in said.stderr  # the command says why it waits
        quick = run_cli(
            "say", "-o", "-", "--format", "pcm", "--start", "now", chunked_text(8) + " quick",
            url=server.url,
        )  # fmt: skip
        assert quick.code == 0 and "stall" not in quick.stderr
        delay_now, at_once, _, _ = listen(server.url, chunked_text(8) + " again", start="now")
        assert delay_now == 0.0
        assert at_once.stall_s > 0.5  # the device cannot keep up: a listener at once waits
        assert held.stall_s < 0.25 * at_once.stall_s
    with (
        worker_process(data, **SLOW),
        start_server(["api", "--data-dir", str(data), "--start", "now"]) as server,
    ):
        delay, _, _, _ = listen(server.url, chunked_text(8) + " once more")
        assert delay == 0.0
        delay, _, _, _ = listen(server.url, chunked_text(8) + " and smooth", start="smooth")
        assert delay > 0.5
