"""The house's rules (issue 26), read from the source like a linter's: which package may import
which, no import circles, and each package's surface exactly what its users outside it import.

    speechd.api        only speechd/cli.py imports it, from outside it
    speechd.worker     neither speechd/api nor speechd/service (nor speechd/wyoming) imports it
    speechd.durable    neither door (speechd/api, speechd/wyoming) imports it: the service is
                       the one door to the store
    speechd.casts      the doors import only its shapes (`DOOR_SHAPES`), never what reads or
                       names streams
    litestar, uvicorn  only speechd/api and speechd/cli.py import them
    speechd.text       the floor below the engine: of speechd it imports only the error tree
                       (the engine, the worker, the service and the doors import it, never the
                       other way), nowhere torch, ONNX Runtime or kokoro; it imports and plans
                       SSML in a process where torch and onnxruntime cannot be imported
    speechd.casts      at most 40 names; speechd.worker at most 15
    tests              nothing outside tests/ imports it: loadtest/ and the shared harnesses
                       (harness/) stand without the test suite
    committed text     speaks only of the repository: no absolute path of a machine (a
                       benchmark's temporary folder, a checkout), no founding notes kept
                       outside it (their design lives in docs/design/)
    every package      exports what its users outside it import (the names durable and
                       wyoming still export for tests alone are listed: at most those)

A name a test needs that no user outside the package imports is reached through the private
module that defines it (`from speechd.casts._records import meta_record`), never exported for it."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("speechd", "harness", "loadtest", "scripts", "clients")
USERS = ("speechd", "loadtest", "scripts", "clients")
"""Who a package's surface is for: harness/ is the tests' scaffolding (the load tests run it
too), and reaches into private modules as a test does."""


def _files(*folders: str) -> Iterator[tuple[str, ast.Module]]:
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def _package_of(rel: str) -> str:
    """The package a source file is in: `speechd/api/gateway/_gateway.py` and
    `speechd/api/gateway/__init__.py` -> `speechd.api.gateway`."""
    return ".".join(rel.split("/")[:-1])


def _imported(rel: str, tree: ast.Module) -> Iterator[tuple[str, list[str]]]:
    """Every module `rel` imports (relative imports made absolute), with the names it takes
    from it (none for `import x`)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(rel).split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            yield module, [alias.name for alias in node.names]


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _importers(package: str, *, names: bool = False) -> set[str]:
    """Source files outside `package` that import it (`from speechd import api` too)."""
    parent, _, leaf = package.rpartition(".")
    found = set()
    for rel, tree in _files(*SOURCES):
        if _under(_package_of(rel), package):
            continue
        for module, taken in _imported(rel, tree):
            if _under(module, package) or (module == parent and leaf in taken):
                found.add(rel)
    return found


def test_only_the_cli_imports_the_api_from_outside_it() -> None:
    assert _importers("speechd.api") == {"speechd/cli.py"}


@pytest.mark.parametrize("door", ["speechd/api", "speechd/service", "speechd/wyoming"])
def test_the_doors_and_the_service_never_import_the_worker(door: str) -> None:
    if not (ROOT / door).is_dir():
        pytest.skip(f"{door} is not on this branch")
    found = [
        (rel, module)
        for rel, tree in _files(door)
        for module, taken in _imported(rel, tree)
        if _under(module, "speechd.worker") or (module == "speechd" and "worker" in taken)
    ]
    assert not found, found


# -- the one door to the store ---------------------------------------------------------------

DOORS = ("speechd/api", "speechd/wyoming")

DOOR_SHAPES = {
    "speechd.casts": {"CastCaptions", "CastFile", "CastState", "CastStatus", "CastWord"},
    "speechd.casts.schema": {"AudioChunk", "Meta", "Word", "WorkerNotice"},
}
"""What the doors may import of `speechd.casts`: the shapes the service hands them (a cast's
status, its words, a finished file's layout, a record's decoded audio and words, a cast's meta,
a worker's notice), plain values that read nothing. Everything else there reads or writes
streams (`cast_audio`, `playable_chunks`, `follow_cast`, `cast_status`, `read_head`, `lay_out`,
`file_bytes`, `wait_ended`, `CastWords`, `QueueLine`, `worker_health`, `submit`, `append_input`,
`sweep_casts_forever`, ...) or names and decodes them (`cast_stream`, `worker_stream`,
`PROGRESS_DONE`, `H_EVENT`, `public_headers`, `decode`, ...): the service's own business. So is
the module as a whole (`from speechd import casts`, `from speechd.casts import schema`), and
every private module of it."""


def _door_imports() -> Iterator[tuple[str, str, list[str]]]:
    for rel, tree in _files(*DOORS):
        for module, taken in _imported(rel, tree):
            yield rel, module, taken


def test_the_doors_never_import_the_store() -> None:
    found = [
        (rel, module, taken)
        for rel, module, taken in _door_imports()
        if _under(module, "speechd.durable") or (module == "speechd" and "durable" in taken)
    ]
    assert not found, found


def test_the_doors_import_only_the_shapes_of_casts() -> None:
    found = []
    for rel, module, taken in _door_imports():
        if module == "speechd" and "casts" in taken:
            found.append((rel, module, ["casts"]))
        elif _under(module, "speechd.casts"):
            allowed = DOOR_SHAPES.get(module, set())
            beyond = [name for name in taken if name not in allowed] or ([] if taken else [module])
            if beyond:
                found.append((rel, module, beyond))
    assert not found, found


def test_only_the_api_and_the_cli_import_the_web_framework() -> None:
    found = [
        (rel, module)
        for rel, tree in _files("speechd")
        if not rel.startswith("speechd/api/") and rel != "speechd/cli.py"
        for module, _ in _imported(rel, tree)
        if module.split(".")[0] in ("litestar", "uvicorn")
    ]
    assert not found, found


#: All the text front end imports of speechd: the floor below it.
TEXT_IMPORTS = ("speechd.errors",)
#: What no module of it imports, even lazily: the model's runtimes and code.
TEXT_NEVER = ("torch", "onnxruntime", "onnx", "kokoro")


def test_the_text_front_end_imports_nothing_above_it() -> None:
    assert (ROOT / "speechd/text/__init__.py").is_file(), "speechd/text is the text front end"
    found = []
    for rel, tree in _files("speechd/text"):
        for module, taken in _imported(rel, tree):
            # `from speechd import engine` names the package it takes
            names = [f"speechd.{n}" for n in taken] if module == "speechd" else [module]
            for name in names:
                ours = _under(name, "speechd") and not _under(name, "speechd.text")
                if (ours and name not in TEXT_IMPORTS) or name.split(".")[0] in TEXT_NEVER:
                    found.append((rel, name))
    assert not found, found


_BLOCK_THE_RUNTIMES = """
import importlib.abc, sys

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] in ("torch", "onnxruntime"):
            raise ImportError(f"{name} cannot be imported here")

sys.meta_path.insert(0, Blocked())
"""

_READ_AND_PLAN = """
import speechd.text as text

SSML = (
    '<speak>Hello <break time="300ms"/> world, we paid '
    '<say-as interpret-as="cardinal">42</say-as> pounds.</speak>'
)
assert text.looks_like_ssml(SSML)
assert text.check_input(SSML, lang="a", ssml=True) == text.InputCheck()
with text.without_torch():
    g2p = text.build_g2p("a")
chunks = list(text.Planner(g2p, text.ChunkPolicy(), text=SSML, done=True, ssml=True).chunks())
words = [(span.text, SSML[slice(*span.source)]) for chunk in chunks for span in chunk.words]
assert words[0] == ("Hello", "Hello") and chunks[0].pause_ms == 300, (chunks[0], words)
assert ("forty", "42") in words and words[-1] == ("pounds.", "pounds"), words
assert [chunk.silent for chunk in chunks][:3] == [False, True, False], chunks
assert sum(chunk.silent for chunk in chunks) == 1, chunks
assert chunks[1].lead_ms == 300 and all(chunk.phonemes for chunk in chunks if not chunk.silent)
loaded = [m for m in ("torch", "onnxruntime", "kokoro", "speechd.engine") if m in sys.modules]
assert not loaded, loaded
"""


def test_the_text_front_end_reads_and_plans_where_torch_cannot_be_imported() -> None:
    """The whole front end, misaki's English G2P included, in a process where importing torch
    or onnxruntime raises ImportError (both are installed here, so this is no accident)."""
    code = textwrap.dedent(_BLOCK_THE_RUNTIMES) + textwrap.dedent(_READ_AND_PLAN)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]


# -- circles ---------------------------------------------------------------------------------


def _circles(folder: str) -> list[list[str]]:
    """The import circles among the modules of one package folder (type-only imports count:
    a circle drawn by annotations is still a circle a reader walks)."""
    package = folder.replace("/", ".")
    graph: dict[str, set[str]] = {}
    for rel, tree in _files(folder):
        if rel.count("/") != folder.count("/") + 1:
            continue  # subpackages are their own rooms
        module = _package_of(rel) + "." + Path(rel).stem
        graph[module] = {
            ".".join(m.split(".")[: package.count(".") + 2])
            for m, taken in _imported(rel, tree)
            if _under(m, package) and m != package
        }
    found: list[list[str]] = []

    def walk(path: list[str]) -> None:  # each circle once: from its least module
        for nxt in sorted(graph.get(path[-1], ())):
            if nxt == path[0]:
                found.append([*path, nxt])
            elif nxt not in path and nxt > path[0]:
                walk([*path, nxt])

    for start in sorted(graph):
        walk([start])
    return found


PACKAGES = sorted(
    p.relative_to(ROOT).as_posix()
    for p in (ROOT / "speechd").rglob("__init__.py")
    if "static" not in p.parts
)


# Circles still drawn (type-only), each its package's to cut: the test holds each package to
# exactly these, so a new circle fails it, and so does one that is cut while still listed here
# (delete its entry with the cut).
KNOWN_CIRCLES = {
    "speechd/wyoming": [["_door", "_session"]],  # _session types the door
}


@pytest.mark.parametrize("folder", [p.removesuffix("/__init__.py") for p in PACKAGES])
def test_no_package_imports_itself_in_a_circle(folder: str) -> None:
    found = [[m.rsplit(".", 1)[1] for m in circle[:-1]] for circle in _circles(folder)]
    assert found == KNOWN_CIRCLES.get(folder, [])


# -- surfaces --------------------------------------------------------------------------------

SURFACES = sorted(
    [p.removesuffix("/__init__.py").replace("/", ".") for p in PACKAGES if p.count("/") > 1]
    + ["speechd.casts.schema"]
)
"""Every package of speechd (and the casts' public schema module): each `__all__` is checked."""

# Names exported only for tests, each its package's to narrow (a test then imports the
# private module that defines the name): a package may keep at most these, so a new name
# exported for tests alone fails the check.
KNOWN_TEST_ONLY = {
    "speechd.durable": {"EmbeddedStore"},
    "speechd.wyoming": {
        "AFTER_ERROR_IDLE_S",
        "AUDIO_CHUNK_SAMPLES",
        "IDLE_S",
        "LANGUAGE_TAGS",
        "MAX_HEADER_BYTES",
        "MAX_PART_BYTES",
        "MAX_SYNTHESIZE_CHARS",
        "PROGRAM",
        "SEND_TIMEOUT_S",
        "SERVICE_TYPE",
        "describe",
        "stream_slots",
    },
}


@pytest.mark.parametrize("name", SURFACES)
def test_all_is_exactly_the_public_names(name: str) -> None:
    module = importlib.import_module(name)
    public = {
        n
        for n, value in vars(module).items()
        if not n.startswith("_")
        and n != "annotations"
        and not (isinstance(value, types.ModuleType) and n not in module.__all__)
    }
    assert sorted(module.__all__) == sorted(public)
    assert len(set(module.__all__)) == len(module.__all__)


@pytest.mark.parametrize("name", SURFACES)
def test_every_exported_name_has_a_user_outside(name: str) -> None:
    """Exported for speechd, its clients, scripts and load tests; never for tests alone."""
    module = importlib.import_module(name)
    parent, _, leaf = name.rpartition(".")
    used: set[str] = set()
    for rel, tree in _files(*USERS):
        if _under(_package_of(rel), name):
            continue
        aliases = set()
        for imported, taken in _imported(rel, tree):
            if imported == name:
                used.update(taken)
            elif imported == parent and leaf in taken:
                aliases.add(leaf)
        for node in ast.walk(tree):  # `from speechd import casts` ... `casts.submit(...)`
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
            ):
                used.add(node.attr)
    for_tests = set(module.__all__) - used
    assert for_tests <= KNOWN_TEST_ONLY.get(name, set()), for_tests


def test_the_api_exports_what_the_cli_imports() -> None:
    import speechd.api

    tree = ast.parse((ROOT / "speechd/cli.py").read_text(encoding="utf-8"))
    imports = _imported("speechd/cli.py", tree)
    taken = {n for module, names in imports if module == "speechd.api" for n in names}
    assert set(speechd.api.__all__) == taken


def test_the_casts_surface_has_at_most_40_names() -> None:
    import speechd.casts

    assert len(speechd.casts.__all__) <= 40, len(speechd.casts.__all__)


def test_the_worker_surface_has_at_most_15_names() -> None:
    import speechd.worker

    assert len(speechd.worker.__all__) <= 15, len(speechd.worker.__all__)


# -- the repository speaks of itself ---------------------------------------------------------


def test_nothing_outside_the_tests_imports_them() -> None:
    found = [
        (rel, module)
        for rel, tree in _files(*SOURCES)
        for module, taken in _imported(rel, tree)
        if _under(module, "tests")
    ]
    assert not found, found


def _committed() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=False
    )
    if listed.returncode != 0:
        pytest.skip("not a git checkout: nothing is committed here")
    paths = [ROOT / name for name in listed.stdout.decode().split("\0") if name]
    return [path for path in paths if path.is_file()]


def _text(path: Path) -> str | None:
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None  # an image, a font, a model file
    return data.decode("utf-8", errors="replace")


# Folders of a machine, not of the repository: a checkout, a home, a temporary folder.
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|root|home|Users|tmp)/")
# Image recipes and their tests name folders inside the image they build, not of a machine.
IMAGES = ("containers/", "tests/containers/")
# The founding notes the design came from are not in the repository: cite docs/design/.
FOUNDING_NOTES = re.compile(r"\b(?:DESIGN|STYLE)" + re.escape(".md"))


def test_committed_text_names_no_machine_path_and_no_notes_outside_the_repository() -> None:
    found = []
    for path in _committed():
        text = _text(path)
        if text is None:
            continue
        rel = path.relative_to(ROOT).as_posix()
        in_image = rel.startswith(IMAGES)
        for number, line in enumerate(text.splitlines(), 1):
            if (MACHINE_PATH.search(line) and not in_image) or FOUNDING_NOTES.search(line):
                found.append(f"{rel}:{number}: {line.strip()}")
    assert not found, "\n".join(found)
