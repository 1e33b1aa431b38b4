"""One version, in speechd/__init__.py: pyproject.toml reads it from there, and every place
that repeats it for a reader that cannot (the client's user agent, the Home Assistant add-on's
config.yaml, the newest released heading of CHANGELOG.md) says the same."""

from __future__ import annotations

import re
from pathlib import Path

import speechd
import speechd_client

try:
    import tomllib  # novermin (3.11+; the fallback below is for 3.10)
except ModuleNotFoundError:  # Python 3.10: pytest's own dependency
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def test_pyproject_reads_the_version_from_the_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    dynamic = project["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "speechd.__version__"}


def test_every_copy_of_the_version_is_the_package_s() -> None:
    version = speechd.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", version)
    assert speechd_client.__version__ == version
    addon = (ROOT / "containers" / "homeassistant" / "config.yaml").read_text()
    assert re.search(r'^version: "([^"]+)"$', addon, re.MULTILINE).group(1) == version  # type: ignore[union-attr]
    # The newest released heading: what is merged and not yet released sits above it.
    headings = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    released = [h for h in headings if h != "Unreleased"]
    assert released and released[0] == version
