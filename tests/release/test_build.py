"""The sdist and the wheel a release is: built without a warning (setuptools' deprecations
turn into failed builds on a date they name: the license as a TOML table stops building on
2027-02-18), their metadata the one version and an SPDX license, and the wheel installed, not
editable, into a fresh virtual environment, where it serves and speaks."""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import httpx
import pytest

import speechd
from harness.servers import free_port
from harness.speech import recall, transcribe_pcm16

from .conftest import Built

SENTENCE = "My sister bought a red bicycle at the market near the train station yesterday."
READY_S = 600.0  # failsafes far above a start (~20 s) and a sentence here
INSTALL_S = 1200.0


@pytest.mark.slow
def test_the_build_warns_of_nothing(built: Built) -> None:
    warnings = [line for line in built.output.splitlines() if re.search(r"(?i)warn|deprecat", line)]
    assert not warnings, "\n".join(warnings)


@pytest.mark.slow
def test_the_wheel_and_sdist_say_the_version_and_the_license(built: Built) -> None:
    version = speechd.__version__
    assert built.wheel.name == f"speechd-{version}-py3-none-any.whl"
    with zipfile.ZipFile(built.wheel) as wheel:
        names = wheel.namelist()
        metadata = wheel.read(f"speechd-{version}.dist-info/METADATA").decode()
    assert f"\nVersion: {version}\n" in metadata
    assert (
        "\nLicense-Expression: Apache-2.0\n" in metadata and "\nLicense-File: LICENSE\n" in metadata
    )
    assert f"speechd-{version}.dist-info/licenses/LICENSE" in names
    assert "speechd/api/gateway/static/player.js" in names  # the player's own files
    assert any(n.startswith("speechd_client/") for n in names)
    with tarfile.open(built.sdist) as sdist:
        assert f"speechd-{version}/LICENSE" in sdist.getnames()


@pytest.mark.container
def test_the_wheel_installed_in_a_fresh_venv_serves_and_speaks(
    built: Built, model_dir: Path, tmp_path: Path
) -> None:
    import torch

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    # torch as the test environment has it (the CPU wheel: PyPI's x86_64 one is a CUDA build),
    # then the wheel file itself with the ONNX Runtime engine, as docs/install.md says.
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", f"torch=={torch.__version__}",
         f"{built.wheel}[onnx]"],
        capture_output=True, text=True, timeout=INSTALL_S, check=False,
    )  # fmt: skip
    assert install.returncode == 0, (install.stdout + install.stderr)[-3000:]
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "HOME": str(tmp_path)}
    where = subprocess.run(
        [str(python), "-c", "import speechd, speechd_client; print(speechd.__file__)"],
        capture_output=True, text=True, env=env, check=True, cwd=tmp_path,
    ).stdout  # fmt: skip
    assert where.startswith(str(venv))  # the installed copy, not this checkout
    version = subprocess.run(
        [str(venv / "bin" / "speechd"), "--version"],
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert version.stdout.strip() == f"speechd {speechd.__version__}"

    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [str(venv / "bin" / "speechd"), "serve", "--port", str(port),
             "--data-dir", str(tmp_path / "data"), "--model-dir", str(model_dir)],
            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp_path,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_S
        while True:
            assert server.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            try:
                if httpx.get(url + "/readyz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        body = {"input": SENTENCE, "voice": "af_heart", "response_format": "pcm"}
        speech = httpx.post(url + "/v1/audio/speech", json=body, timeout=300)
        assert speech.status_code == 200
        assert recall(SENTENCE, transcribe_pcm16(speech.content, 24_000)) >= 0.7
        page = httpx.get(url + "/", timeout=30)  # the player's files ship in the wheel
        assert page.status_code == 200
    finally:
        server.terminate()
        assert server.wait(120) == 0, log.read_text()[-3000:]
