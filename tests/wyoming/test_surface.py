"""The Wyoming package's surface: its `__all__`, private modules, and its place in the house
(a client of casts beside the api: no HTTP code, no worker, no model)."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import speechd.wyoming
from harness.servers import ROOT

FORBIDDEN = ("speechd.api", "speechd.app", "speechd.openai_compat", "speechd.gateway",
             "speechd.worker", "torch")  # fmt: skip


def test_all_lists_exactly_the_public_names() -> None:
    module: types.ModuleType = speechd.wyoming
    exported = module.__all__
    assert len(set(exported)) == len(exported)
    assert all(hasattr(module, name) for name in exported)
    names = [m.name for m in pkgutil.iter_modules(module.__path__)]
    assert names and all(name.startswith("_") for name in names)


def test_it_imports_no_http_code_no_worker_and_no_model() -> None:
    folder = Path(speechd.wyoming.__file__).parent
    for source in folder.glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                assert not name.startswith(FORBIDDEN), f"{source.name} imports {name}"


def test_serving_wyoming_never_imports_torch() -> None:
    script = textwrap.dedent(
        """
        import sys
        import speechd.wyoming, speechd.cli
        print("torch" in sys.modules)
        """
    )
    found = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert found.stdout.strip() == "False"
