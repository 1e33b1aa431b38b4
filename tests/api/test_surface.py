"""The api's public surfaces: each module's `__all__`, and no torch in the api process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

import speechd.api
import speechd.api.app
import speechd.api.metrics
import speechd.api.openai_compat
import speechd.cli
import speechd.config
import speechd.limits
import speechd.service
from harness.servers import ROOT
from harness.workers import worker_process


@pytest.mark.parametrize(
    "module",
    [
        speechd.api,
        speechd.api.app,
        speechd.cli,
        speechd.config,
        speechd.limits,
        speechd.api.metrics,
        speechd.api.openai_compat,
        speechd.service,
    ],
)
def test_all_lists_exactly_the_public_names(module: types.ModuleType) -> None:
    exported = module.__all__
    assert len(set(exported)) == len(exported)
    assert all(hasattr(module, name) for name in exported)
    # Every public class or function the module defines is exported; nothing else is.
    defined = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and isinstance(value, type | types.FunctionType)
        and value.__module__.startswith(module.__name__)
    }
    assert defined <= set(exported), defined - set(exported)


@pytest.mark.parametrize("package", [speechd.api.openai_compat, speechd.limits])
def test_packages_keep_their_modules_private(package: types.ModuleType) -> None:
    import pkgutil

    names = [m.name for m in pkgutil.iter_modules(package.__path__)]
    assert names and all(name.startswith("_") for name in names)


def test_serving_a_request_never_imports_torch(tmp_path: Path) -> None:
    # The api runs in a process of its own; the worker that makes the audio in another.
    script = textwrap.dedent(
        f"""
        import sys
        from litestar.testing import TestClient
        from speechd.api.app import create_app
        from speechd.config import Settings
        with TestClient(create_app(Settings(data_dir={str(tmp_path)!r}))) as client:
            assert client.get("/v1/audio/voices").status_code == 200
            speech = client.post("/v1/audio/speech", json={{"input": "hi", "voice": "alloy"}})
            assert speech.status_code == 200 and speech.content, speech.text
            assert client.get("/metrics").status_code == 200
        heavy = {{"torch", "kokoro", "misaki", "transformers", "spacy"}}
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in heavy)
        assert not loaded, loaded
        """
    )
    with worker_process(tmp_path):
        result = subprocess.run(
            [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
    assert result.returncode == 0, result.stderr
