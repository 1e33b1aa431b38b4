"""The Wyoming door as the commands run it: `speechd api --wyoming-uri` (one event loop for
both doors, the api's stream caps counting Wyoming connections) and `speechd wyoming` alone
against a shared store; each with a worker on the cost-model engine beside it."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from wyoming.client import AsyncTcpClient, AsyncUnixClient
from wyoming.info import Describe, Info
from wyoming.ping import Ping
from wyoming.tts import Synthesize

from harness.servers import ROOT, _env, free_port, start_server, wait_until
from harness.workers import running_worker
from speechd.cli import main
from speechd.config import SettingsError, load_settings

from ._support import hear

FAILSAFE_S = 30.0


def test_the_uri_is_checked_with_the_settings() -> None:
    for uri in ("tcp://0.0.0.0:10200", "tcp://[::]:10200", "unix:///run/speechd.sock"):
        assert load_settings({"wyoming_uri": uri}, environ={}).wyoming_uri == uri
    assert load_settings({}, environ={"SPEECHD_WYOMING_URI": "tcp://h:1"}).wyoming_uri
    assert load_settings({}, environ={}).wyoming_uri is None  # off by default
    for bad in ("http://h:1", "tcp://h", "tcp://:10200", "tcp://h:99999", "unix://", "10200"):
        with pytest.raises(SettingsError, match="--wyoming-uri / SPEECHD_WYOMING_URI"):
            load_settings({"wyoming_uri": bad}, environ={})


def test_speechd_wyoming_needs_a_uri(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["wyoming", "--data-dir", "unused"])
    assert exited.value.code == 2
    assert "needs --wyoming-uri" in capsys.readouterr().err


@pytest.mark.slow
async def test_the_api_and_its_wyoming_door_share_the_stream_caps(tmp_path: Path) -> None:
    data = tmp_path / "data"
    port = free_port()
    args = ["api", "--data-dir", str(data), "--max-streams", "1"]
    args += ["--wyoming-uri", f"tcp://127.0.0.1:{port}"]
    with running_worker(data), start_server(args) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=FAILSAFE_S) as http:
            speech = {"input": "One slot, two doors.", "response_format": "pcm"}
            async with AsyncTcpClient("127.0.0.1", port) as client:
                await client.write_event(Ping(text="held").event())
                assert (await asyncio.wait_for(client.read_event(), FAILSAFE_S)).type == "pong"
                busy = await http.post("/v1/audio/speech", json=speech)
                assert busy.status_code == 503, busy.text
                assert busy.json()["error"]["code"] == "server_busy"
            deadline = time.monotonic() + FAILSAFE_S
            while (answer := await http.post("/v1/audio/speech", json=speech)).status_code != 200:
                assert time.monotonic() < deadline, answer.text
                await asyncio.sleep(0.1)
            # ... and the other way round: a Wyoming connection past the caps is refused.
            held = {**speech, "input": "A long reply holds the only slot. " * 60}
            async with (
                http.stream("POST", "/v1/audio/speech", json=held),
                AsyncTcpClient("127.0.0.1", port) as client,
            ):
                refused = await asyncio.wait_for(client.read_event(), FAILSAFE_S)
            assert refused is not None and refused.type == "error"
            assert refused.data["code"] == "server_busy"
        assert server.stop() == 0


@contextlib.contextmanager
def _wyoming_command(data: Path, socket: Path) -> Iterator[subprocess.Popen[bytes]]:
    args = ["wyoming", "--data-dir", str(data), "--wyoming-uri", f"unix://{socket}"]
    log = data.parent / "wyoming.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "speechd", *args], cwd=ROOT, env=_env(), stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_until(lambda: socket.exists() or process.poll() is not None, FAILSAFE_S, "a socket")
        assert process.poll() is None, log.read_text()
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.slow
async def test_speechd_wyoming_serves_apart_against_a_shared_store(tmp_path: Path) -> None:
    data, socket = tmp_path / "data", tmp_path / "wyoming.sock"
    with running_worker(data), _wyoming_command(data, socket) as process:
        async with AsyncUnixClient(str(socket)) as client:
            await client.write_event(Describe().event())
            info = await asyncio.wait_for(client.read_event(), FAILSAFE_S)
            assert info is not None and Info.is_type(info.type)
            await client.write_event(Synthesize(text="Served apart, spoken all the same.").event())
            heard = await hear(client)
        assert heard.kinds[-1] == "audio-stop" and heard.audio
        process.send_signal(signal.SIGTERM)
        assert process.wait(FAILSAFE_S) == 0
    assert not socket.exists()  # the server removed its socket as it stopped
