"""The release as a stranger gets it: `python -m build` run on a copy of the checkout (as on a
clean clone: no build folder, no egg-info), once a session."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LEFT_OUT = shutil.ignore_patterns(
    ".git", ".venv*", "build", "dist", "__pycache__", "*.egg-info", "test-artifacts", ".*_cache"
)


@dataclass(frozen=True)
class Built:
    output: str
    """What `python -m build` printed (its backend's output too)."""
    wheel: Path
    sdist: Path


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    base = tmp_path_factory.mktemp("release")
    tree = base / "speechd"
    shutil.copytree(ROOT, tree, ignore=LEFT_OUT)
    # Byte-compiling off in this environment is the test machine's setting, not the package's.
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")
    }
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(base / "dist"), str(tree)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    (wheel,) = (base / "dist").glob("*.whl")
    (sdist,) = (base / "dist").glob("*.tar.gz")
    return Built(output, wheel, sdist)
