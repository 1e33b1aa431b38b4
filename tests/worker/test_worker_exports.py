"""speechd.worker's surface: exactly what its users import, and no name that means something
else elsewhere in speechd."""

from __future__ import annotations

import ast
import importlib
import types
from pathlib import Path

import speechd.worker

ROOT = Path(__file__).resolve().parents[2]
MAX_NAMES = 15  # issue 26: the worker's users need no more


def test_all_lists_exactly_the_public_names() -> None:
    public = {name for name in dir(speechd.worker) if not name.startswith("_")}
    modules = {"annotations"}
    assert set(speechd.worker.__all__) == public - modules
    for name in speechd.worker.__all__:
        value = getattr(speechd.worker, name)
        # On 3.10 a generic alias (EncoderFactory, a Callable[...]) passes isinstance(_, type).
        if isinstance(value, type) and not isinstance(value, types.GenericAlias):
            assert value.__module__ == "speechd.worker", name


def _imports_of_worker(folders: tuple[str, ...]) -> dict[str, set[str]]:
    """Per source file in `folders` (outside speechd/worker): the names it imports from
    speechd.worker."""
    found: dict[str, set[str]] = {}
    for folder in folders:
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("speechd/worker/"):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.module == "speechd.worker":
                    found.setdefault(rel, set()).update(a.name for a in node.names)
    return found


def test_the_surface_is_what_its_users_import_and_small() -> None:
    """Every exported name is imported by speechd, the load tests or the scripts (tests use
    it, or a private module explicitly: no name is exported only for them)."""
    used = _imports_of_worker(("speechd", "loadtest", "scripts"))
    imported = set().union(*used.values())
    surface = set(speechd.worker.__all__)
    assert surface <= imported, surface - imported
    assert len(surface) <= MAX_NAMES


def test_users_find_what_they_import() -> None:
    folders = ("speechd", "tests", "harness", "loadtest", "scripts")
    for path, names in _imports_of_worker(folders).items():
        missing = names - set(speechd.worker.__all__)
        assert not missing, f"{path} imports {missing} from speechd.worker"


def test_only_tests_reach_into_private_modules() -> None:
    """speechd, the load tests and the scripts use the surface alone."""
    for folder in ("speechd", "loadtest", "scripts"):
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("speechd/worker/"):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.module:
                    assert not node.module.startswith("speechd.worker._"), (rel, node.module)
                    if node.module == "speechd.worker":
                        assert not any(a.name.startswith("_") for a in node.names), rel


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
