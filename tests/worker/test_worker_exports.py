"""speechd.worker's surface: exactly what its users import, and no name that means something
else elsewhere in speechd."""

from __future__ import annotations

import ast
import importlib
import types
from pathlib import Path

import speechd.worker

ROOT = Path(__file__).resolve().parents[2]
# Private modules reached from outside the package, and why.
PRIVATE_USES = {
    "tests/worker/test_worker_health.py": "patches _worker.ROTATE_NOTICES to rotate sooner",
}


def test_all_lists_exactly_the_public_names() -> None:
    public = {name for name in dir(speechd.worker) if not name.startswith("_")}
    modules = {"annotations"}
    assert set(speechd.worker.__all__) == public - modules
    for name in speechd.worker.__all__:
        value = getattr(speechd.worker, name)
        # On 3.10 a generic alias (EncoderFactory, a Callable[...]) passes isinstance(_, type).
        if isinstance(value, type) and not isinstance(value, types.GenericAlias):
            assert value.__module__ == "speechd.worker", name


def _imports_of_worker() -> dict[str, set[str]]:
    """Per source file outside speechd/worker: the names it imports from speechd.worker."""
    found: dict[str, set[str]] = {}
    for folder in ("speechd", "tests", "loadtest"):
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("speechd/worker/"):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.module == "speechd.worker":
                    found.setdefault(rel, set()).update(a.name for a in node.names)
    return found


def test_users_find_what_they_import_and_nothing_private() -> None:
    used = _imports_of_worker()
    for path, names in used.items():
        missing = {n for n in names if n not in speechd.worker.__all__ and n not in ("_worker",)}
        assert not missing, f"{path} imports {missing} from speechd.worker"
        if "_worker" in names:
            assert path in PRIVATE_USES, f"{path} reaches into speechd.worker._worker"
    # The surface is what is used (bar the documented exit code and the policy's types,
    # which a custom Policy is written against).
    imported = set().union(*used.values())
    unused = set(speechd.worker.__all__) - imported
    assert unused <= {"EXIT_FAILED", "Decision", "PlanTiming"}, unused


def test_no_public_name_means_two_things() -> None:
    """Two packages exporting one name export one object (there were two `CastState`s and two
    `CastView`s)."""
    owners: dict[str, tuple[str, object]] = {}
    for package in (
        "audio",
        "casts",
        "durable",
        "engine",
        "api.gateway",
        "api.openai_compat",
        "service",
        "worker",
    ):
        module = importlib.import_module(f"speechd.{package}")
        for name in module.__all__:
            value = getattr(module, name)
            if not isinstance(value, type):
                continue
            if name in owners:
                first, other = owners[name]
                assert other is value, f"speechd.{first}.{name} is not speechd.{package}.{name}"
            else:
                owners[name] = (package, value)
