"""No cast id in any log line, at any level (issue 27 item 4): a cast id is the capability to
read the cast. A whole scenario runs against `speechd api --log-level debug` (uvicorn's
access log on) and a supervised worker process logging at debug; every line either wrote is
read back. Ids show as their first four characters and an ellipsis; a store URL's
credentials never show."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import httpx
import pytest

from harness.servers import start_server
from harness.workers import worker_process
from speechd.logs import mask_ids


async def _until(http: httpx.AsyncClient, cast_id: str, state: str) -> None:
    for _ in range(600):
        if (await http.get(f"/v1/casts/{cast_id}")).json()["status"] == state:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the cast never got {state}")


async def _scenario(url: str) -> set[str]:
    """Make, read, follow and fail casts every way there is; the ids it met."""
    ids: set[str] = set()
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        made = await http.post("/v1/casts", json={"input": "Logged nowhere, please."})
        cast_id = made.json()["id"]
        ids.add(cast_id)
        await _until(http, cast_id, "done")
        for path in ("", "/words", "/captions.vtt", "/captions.srt", "/records", "/events"):
            assert (await http.get(f"/v1/casts/{cast_id}{path}")).status_code in (200, 204)
        assert (await http.get(f"/v1/casts/{cast_id}/audio")).status_code == 200
        assert (await http.get(f"/c/{cast_id}")).status_code == 200
        for stream in (True, False):
            spoken = await http.post(
                "/v1/audio/speech",
                json={"voice": "alloy", "input": f"Spoken {stream}.", "stream": stream},
            )
            assert spoken.status_code == 200
            ids.add(spoken.headers["x-cast-id"])
        live = (await http.post("/v1/casts", json={"live": True})).json()
        ids.add(live["id"])
        token = {"authorization": f"Bearer {live['input_token']}"}
        for n, piece in enumerate(["Hello ", "there."]):
            body = {"text": piece, "seq": n, "done": n == 1}
            assert (await http.post(live["input_url"], json=body, headers=token)).status_code == 200
        failing = await http.post("/v1/casts", json={"input": "This one is POISON to speak."})
        ids.add(failing.json()["id"])
        await _until(http, failing.json()["id"], "failed")
        unknown = "Z" * 22
        ids.add(unknown)
        assert (await http.get(f"/v1/casts/{unknown}/words")).status_code == 404
        assert (await http.get(f"/c/{unknown}")).status_code == 404
    return ids


def test_no_cast_id_in_any_log_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # the worker process logs at the level we do
    data = tmp_path / "data"
    with (
        worker_process(data),
        start_server(["api", "--data-dir", str(data), "--log-level", "debug"]) as live,
    ):
        ids = asyncio.run(_scenario(live.url))
        api_log = live.log()
    worker_log = capfd.readouterr().err
    assert "GET /v1/casts/" in api_log and "HTTP/1.1" in api_log  # the access log was on
    assert "failed for good" in worker_log  # the worker's lines about casts were written
    for cast_id in ids:
        assert cast_id not in api_log
        assert cast_id not in worker_log
    assert any(f"/c/{i[:4]}\u2026" in api_log for i in ids)  # masked, and still telling


def test_a_store_urls_credentials_are_never_logged(tmp_path: Path) -> None:
    url = "nats://speechd:hunter2@127.0.0.1:9/?timeout=0.5&retry=0.5"
    with (
        pytest.raises(RuntimeError) as failed,
        start_server(["api", "--store", url], ready=False, timeout=60),
    ):
        pass
    assert "hunter2" not in str(failed.value)
    assert "cannot open the store" in str(failed.value)


def test_mask_ids_masks_ids_and_credentials_only() -> None:
    line = 'GET /v1/casts/AbCdEfGhIjKlMnOpQrStUv/words?x=1 "nats://u:p@h:4222" af_heart(2)'
    assert mask_ids(line) == 'GET /v1/casts/AbCd\u2026/words?x=1 "nats://***@h:4222" af_heart(2)'
    assert mask_ids(json.dumps({"id": "x" * 23})) == json.dumps({"id": "x" * 23})
