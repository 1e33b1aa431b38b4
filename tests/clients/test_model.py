"""`speechd-client say` on the real Kokoro-82M model, through `speechd serve`."""

from __future__ import annotations

import io
from pathlib import Path

import av
import numpy as np
import pytest

from harness.servers import start_server
from tests.support.devices import DEVICE

from ._support import run_cli

pytestmark = pytest.mark.model

SLOW_NOTICE = "speechd-client: the server is slower than real time: the audio starts in "
TEXT = "The quick brown fox jumps over the lazy dog. Then it naps in the sun."


def samples_of(data: bytes) -> np.ndarray:
    with av.open(io.BytesIO(data)) as container:
        frames = [f.to_ndarray().reshape(-1) for f in container.decode(audio=0)]
    return np.concatenate(frames).astype(np.float32) / 32768


def test_say_speaks_with_the_real_model(model_dir: Path, tmp_path: Path) -> None:
    args = ["serve", "--data-dir", str(tmp_path / "data"), "--model-dir", str(model_dir)]
    with start_server([*args, "--device", DEVICE], timeout=240) as server:
        run = run_cli(
            "say", TEXT, "--voice", "af_heart", "-o", str(tmp_path / "fox.wav"), url=server.url
        )
    # On a device slower than real time (this CPU under load) the client says once when the
    # audio starts; nothing else may be said.
    said = [line for line in run.stderr.splitlines() if not line.startswith(SLOW_NOTICE)]
    assert (run.code, said) == (0, [])
    samples = samples_of((tmp_path / "fox.wav").read_bytes())
    seconds = samples.size / 24000
    # About 14 words at a natural pace, and speech, not silence.
    assert 2.5 < seconds < 9.0, seconds
    assert float(np.sqrt(np.mean(samples**2))) > 0.01
