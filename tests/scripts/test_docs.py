"""The manual cannot drift from the CLI, and the README's links lead somewhere.

The flags page (docs/serving/flags.md) is rendered at build time by scripts/mkdocs_hooks.py;
here it is rendered the same way and read back as a reader would, then compared with what
`speechd <command> --help` prints: each of `serve`, `api` and `worker` must list exactly its
own flags. `mkdocs build --strict` (scripts/test.sh) checks the links inside docs/; the
README's links into docs/ are checked here."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from markdown.extensions.toc import slugify

ROOT = Path(__file__).resolve().parents[2]


def _hooks():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "scripts/mkdocs_hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _help_flags(command: str) -> set[str]:
    """The flags `speechd <command> --help` prints, one per option line."""
    out = subprocess.run(
        [sys.executable, "-m", "speechd", command, "--help"], capture_output=True, text=True,
        cwd=ROOT, check=True, timeout=60,
    ).stdout  # fmt: skip
    found = {m.group(1) for m in re.finditer(r"^  (?:-\w, )?(--[\w-]+)", out, flags=re.M)}
    assert found, out
    return found - {"--help"}


def _page_flags(page: str) -> dict[str, set[str]]:
    """The flags the rendered page lists for each command: its sections are headed by the
    commands that take their flags (`### speechd serve, speechd api`)."""
    listed: dict[str, set[str]] = {}
    commands: list[str] = []
    for line in page.splitlines():
        if line.startswith("### "):
            commands = re.findall(r"`speechd (\w+)`", line)
        row = re.match(r"^\| `(--[\w-]+)[^`]*` \|", line)
        if row:
            for command in commands:
                listed.setdefault(command, set()).add(row.group(1))
    return listed


@pytest.fixture(scope="module")
def flags_page() -> str:
    source = (ROOT / "docs/serving/flags.md").read_text(encoding="utf-8")
    page = SimpleNamespace(file=SimpleNamespace(src_uri="serving/flags.md"))
    return str(_hooks().on_page_markdown(source, page=page, config=None, files=None))


@pytest.mark.parametrize("command", ["serve", "api", "worker"])
def test_the_flags_page_lists_exactly_the_flags_of_each_command(
    flags_page: str, command: str
) -> None:
    assert _page_flags(flags_page).get(command) == _help_flags(command)


def test_the_flags_page_names_each_flags_environment_variable(flags_page: str) -> None:
    rows = re.findall(r"^\| `--max-queue[^|]*\| `(SPEECHD_\w+)` \| `(\d+)` \|", flags_page, re.M)
    assert rows == [("SPEECHD_MAX_QUEUE", "64")]
    assert "`SPEECHD_API_KEY`" in flags_page  # --api-key's field is api_keys
    assert "`SPEECHD_VOICE_MAP`" in flags_page  # a setting with no flag


def test_the_flags_page_fails_the_build_without_its_marker() -> None:
    page = SimpleNamespace(file=SimpleNamespace(src_uri="serving/flags.md"))
    with pytest.raises(RuntimeError, match="marker"):
        _hooks().on_page_markdown("# Every flag\n", page=page, config=None, files=None)


def test_the_test_commands_docs_build_fails_on_a_broken_link(tmp_path: Path) -> None:
    """scripts/test.sh's `mkdocs build` line, run as it is on a manual with a link to a page
    that does not exist, fails and names the link (with `--quiet` it once passed)."""
    script = (ROOT / "scripts/test.sh").read_text(encoding="utf-8")
    (line,) = [x for x in script.splitlines() if "mkdocs build" in x and not x.startswith("#")]
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/index.md").write_text("# Home\n\nSee [the missing page](missing.md).\n")
    (tmp_path / "mkdocs.yml").write_text("site_name: t\ndocs_dir: docs\nsite_dir: build/site\n")
    command = line.replace(".venv/bin/mkdocs", f"{sys.executable} -m mkdocs")
    done = subprocess.run(
        ["bash", "-c", f"set -euo pipefail\n{command}"], cwd=tmp_path, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0, done.stdout + done.stderr
    assert "missing.md" in done.stdout + done.stderr


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {slugify(m.group(1), "-") for m in re.finditer(r"^#+ (.+)$", text, flags=re.M)}


def test_the_readmes_links_lead_to_pages_and_headings_that_exist() -> None:
    checked = 0
    for readme in (ROOT / "README.md", ROOT / "clients/README.md"):
        text = readme.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"\w+://", target):
                continue
            path, _, anchor = target.partition("#")
            file = (readme.parent / path).resolve()
            assert file.exists(), f"{readme.name}: {target} does not exist"
            if anchor:
                assert anchor in _anchors(file), f"{readme.name}: no heading for {target}"
            checked += 1
    assert checked > 10


def test_the_house_plan_lists_every_package_of_speechd() -> None:
    """The design page's layout (docs/design/index.md) names each package of speechd/ as the
    code has them, and no package that is gone."""
    page = (ROOT / "docs/design/index.md").read_text(encoding="utf-8")
    layout = page.split("## Layout", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    listed = set(re.findall(r"^  ([a-z_]+)/ ", layout, flags=re.M))
    packages = {p.parent.name for p in (ROOT / "speechd").glob("*/__init__.py")}
    assert listed == packages
