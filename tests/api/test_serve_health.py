"""`speechd serve` for real, when things are not right: a model folder that cannot be loaded,
and voices whose language this machine cannot speak (the real Kokoro-82M voice folder holds
Japanese voices; misaki's `ja` extra is not installed here)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import httpx
import pytest

from harness.servers import start_server, wait_until

pytestmark = pytest.mark.slow

MODEL_DIR = Path(
    os.environ.get("SPEECHD_TEST_MODEL_DIR", Path.home() / ".cache/speechd/kokoro-82m")
)


def test_a_model_folder_that_cannot_be_loaded_is_a_503_that_says_why(tmp_path: Path) -> None:
    empty = tmp_path / "no-model"
    empty.mkdir()
    args = ["serve", "--data-dir", str(tmp_path / "data"), "--model-dir", str(empty)]
    with start_server(args, ready=False, timeout=60) as server:

        def told() -> bool:
            body = httpx.get(server.url + "/readyz", timeout=5).json()
            return body.get("error", {}).get("code") == "model_unavailable"

        wait_until(told, 60, "/readyz to say the model is unavailable")
        error = httpx.get(server.url + "/readyz", timeout=5).json()["error"]
        assert error["message"].startswith("The model is unavailable: ")
        assert str(empty) in error["message"]
        speech = httpx.post(server.v1 + "/audio/speech", json={"input": "Hi."}, timeout=30)
        assert speech.status_code == 503
        assert speech.json()["error"]["code"] == "model_unavailable"


@pytest.mark.model
@pytest.mark.skipif(
    importlib.util.find_spec("pyopenjtalk") is not None, reason="misaki[ja] is installed here"
)
def test_japanese_voices_without_their_g2p_are_refused_and_not_listed(tmp_path: Path) -> None:
    args = ["serve", "--data-dir", str(tmp_path / "data"), "--model-dir", str(MODEL_DIR)]
    args += ["--device", "cpu"]
    with start_server(args, timeout=240) as server:
        voices = httpx.get(server.v1 + "/audio/voices", timeout=30).json()["voices"]
        ids = [v["id"] for v in voices]
        assert "af_heart" in ids and not [v for v in ids if v.startswith("j")]
        assert {"id": "af_heart", "name": "Heart (American English, female)"} in voices
        response = httpx.post(
            server.v1 + "/audio/speech", json={"input": "Konnichiwa.", "voice": "jf_alpha"}
        )
        assert response.status_code == 400
        error = response.json()["error"]
        assert (error["param"], error["code"]) == ("voice", "voice_unavailable")
        assert "misaki[ja]" in error["message"]
