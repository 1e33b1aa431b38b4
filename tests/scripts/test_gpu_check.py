"""scripts/gpu_check.sh keeps the torch it finds with a pip constraint: the installed
distribution's version, which pip matches, not `torch.__version__`, which PyPI's CUDA wheel
gives a local label its metadata lacks (2.13.0+cu130 against 2.13.0): a constraint on that
matched nothing, and pip refused to install the GPU check's requirements (seen in the cuda
image). Here against a stand-in torch shaped like that wheel."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_constraint_names_the_installed_distribution_s_version(tmp_path: Path) -> None:
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text('__version__ = "2.13.0+cu130"\n')
    info = tmp_path / "torch-2.13.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0\n")
    script = (ROOT / "scripts" / "gpu_check.sh").read_text()
    (line,) = [x for x in script.splitlines() if '> "$keep"' in x]
    snippet = re.search(r"-c '([^']+)'", line).group(1)  # type: ignore[union-attr]
    done = subprocess.run(
        [sys.executable, "-c", snippet],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert done.stdout.strip() == "torch==2.13.0"
