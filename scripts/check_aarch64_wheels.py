"""Prove that speechd installs on a Jetson without a compiler: every runtime dependency but
torch resolves to a binary wheel for linux aarch64 on CPython 3.10 (JetPack 6, Ubuntu 22.04,
glibc 2.35) and CPython 3.12 (JetPack 7, Ubuntu 24.04, glibc 2.39).

    python scripts/check_aarch64_wheels.py [--force]

For each target, pip resolves the whole tree (`pip install --dry-run --report`) with
`--only-binary=:all:`, the target's platform tags (manylinux_2_17 up to its glibc, and
manylinux2014), `--python-version`, `--implementation cp` and `--abi`; a dependency without
such a wheel fails the resolution, and pip's message names it. Wheels' metadata is read
from the index (PEP 658), so nothing large is downloaded. torch is left out: Jetson users
install NVIDIA's build for their JetPack, and kokoro (and spacy-curated-transformers)
depend on it, so a stub wheel named torch stands in for it in the resolution. Runtime
dependencies are pyproject.toml's `dependencies` and the extras in `EXTRAS`.

pip runs against PyPI (`SPEECHD_WHEEL_INDEX` to use a mirror) with this machine's pip
configuration ignored, so a local wheel folder or constraint file cannot hide a gap. A
passing result is kept in $SPEECHD_CACHE/aarch64-wheels (default ~/.cache/speechd) for
seven days or until the dependencies or this script change; --force checks again.
Exit status: 0 all resolve; 1 something does not (pip's message says what: a dependency
without such a wheel, or an index it could not reach); 2 this pip is too old to check.
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib  # novermin (3.11+; the fallback below is for 3.10)
except ModuleNotFoundError:  # Python 3.10: pytest's own dependency, in every test venv
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = ("nats", "nvml", "onnx")
"""Optional extras a Jetson deployment may install (the NATS store, NVML telemetry, ONNX
Runtime on the CPU; `onnx-gpu` is left out: on a Jetson that is NVIDIA's wheel, not PyPI's)."""
INDEX = "https://pypi.org/simple"
STUB_VERSION = "9999.0"
MAX_AGE_S = 7 * 86400
MIN_PIP = (23, 1)  # --report since 22.2; PEP 658 metadata (no wheel downloads) since 23.1


@dataclass(frozen=True)
class Target:
    python: str
    glibc_minor: int
    label: str

    @property
    def abi(self) -> str:
        return "cp" + self.python.replace(".", "")

    @property
    def platforms(self) -> list[str]:
        tags = [f"manylinux_2_{minor}_aarch64" for minor in range(17, self.glibc_minor + 1)]
        return [*tags, "manylinux2014_aarch64"]


TARGETS = (
    Target("3.10", 35, "JetPack 6, glibc 2.35"),
    Target("3.12", 39, "JetPack 7, glibc 2.39"),
)


def runtime_requirements() -> list[str]:
    """pyproject.toml's runtime dependencies and EXTRAS, torch left out."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = list(project["dependencies"])
    for extra in EXTRAS:
        found += project.get("optional-dependencies", {}).get(extra, [])
    unique = sorted(set(found))
    return [r for r in unique if re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower() != "torch"]


def _stub_torch(folder: Path) -> Path:
    """A wheel named torch with nothing in it: it satisfies the tree's torch requirements."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"torch-{STUB_VERSION}-py3-none-any.whl"
    if path.exists():
        return folder
    info = f"torch-{STUB_VERSION}.dist-info"
    files = {
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: torch\nVersion: "
        f"{STUB_VERSION}\nSummary: stand-in for NVIDIA's torch in the aarch64 wheel check\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: speechd\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    partial = path.with_suffix(".part")
    with zipfile.ZipFile(partial, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
        wheel.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    partial.replace(path)
    return folder


def _pip_env() -> dict[str, str]:
    """This environment without pip's configuration (files and PIP_* variables), keeping
    what reaching the index needs (certificates, timeouts, proxies)."""
    keep = {"PIP_CERT", "PIP_CLIENT_CERT", "PIP_DEFAULT_TIMEOUT", "PIP_PROXY", "PIP_RETRIES"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in keep}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def _wheel_tags(filename: str) -> tuple[str, str, str]:
    """(python, abi, platform) tags of a wheel's file name."""
    parts = filename[: -len(".whl")].split("-")
    return parts[-3], parts[-2], parts[-1]


def check(target: Target, requirements: list[str], stubs: Path) -> tuple[bool, str]:
    """Resolve `requirements` for `target`; (ok, a summary or pip's complaint)."""
    index = os.environ.get("SPEECHD_WHEEL_INDEX", INDEX)
    with tempfile.TemporaryDirectory(prefix="speechd-wheels-") as tmp:
        report = Path(tmp) / "report.json"
        command = [
            sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
            "--quiet", "--report", str(report), "--target", str(Path(tmp) / "target"),
            "--only-binary=:all:", *(f"--platform={p}" for p in target.platforms),
            f"--python-version={target.python}", "--implementation=cp",
            f"--abi={target.abi}", f"--index-url={index}", f"--find-links={stubs}",
            *requirements, f"torch=={STUB_VERSION}",
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, env=_pip_env())
        if done.returncode != 0 or not report.exists():
            lines = [x for x in (done.stderr or done.stdout).splitlines() if x.strip()]
            errors = [x for x in lines if x.startswith("ERROR")] or lines[-3:]
            return False, " ".join(x.strip() for x in errors)[:2000]
        installed = json.loads(report.read_text())["install"]
    compiled, bad = [], []
    for item in installed:
        name = item["metadata"]["name"]
        if name.lower() == "torch":
            continue
        filename = item["download_info"]["url"].rsplit("/", 1)[-1]
        if not filename.endswith(".whl"):
            bad.append(f"{name} ({filename})")
            continue
        _, abi, platform = _wheel_tags(filename)
        if platform != "any":
            if "aarch64" not in platform:
                bad.append(f"{name} ({filename})")
            compiled.append(f"{name} {item['metadata']['version']}")
        elif abi != "none":
            bad.append(f"{name} ({filename})")
    if bad:
        return False, "not a binary wheel for the target: " + ", ".join(bad)
    return True, (
        f"{len(installed) - 1} packages, all wheels; compiled for aarch64: "
        + ", ".join(sorted(compiled, key=str.lower))
    )


def _pip_version() -> tuple[int, ...]:
    import importlib.metadata

    version = importlib.metadata.version("pip")
    return tuple(int(p) for p in re.findall(r"\d+", version)[:2])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--force", action="store_true", help="check again, ignoring the cache")
    parser.add_argument(
        "--with", dest="extra", action="append", default=[], metavar="REQUIREMENT",
        help="check this requirement too (repeatable)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    me = Path(sys.argv[0]).name or "check_aarch64_wheels.py"
    if _pip_version() < MIN_PIP:
        need = ".".join(map(str, MIN_PIP))
        print(f"{me}: pip {need} or newer is needed: {sys.executable} -m pip install "
              f"'pip>={need}'", file=sys.stderr)  # fmt: skip
        return 2
    requirements = runtime_requirements() + args.extra
    cache = Path(os.environ.get("SPEECHD_CACHE") or Path.home() / ".cache" / "speechd")
    cache = cache / "aarch64-wheels"
    cache.mkdir(parents=True, exist_ok=True)
    script = Path(__file__).read_bytes()
    todo: list[tuple[Target, Path]] = []
    for target in TARGETS:
        key = hashlib.sha256(
            json.dumps([target.python, target.glibc_minor, requirements]).encode() + script
        ).hexdigest()[:16]
        stamp = cache / f"cp{target.abi[2:]}-{key}.ok"
        fresh = stamp.exists() and time.time() - stamp.stat().st_mtime < MAX_AGE_S
        if fresh and not args.force:
            day = time.strftime("%Y-%m-%d", time.localtime(stamp.stat().st_mtime))
            print(f"aarch64 wheels for CPython {target.python} ({target.label}): {day}, cached")
        else:
            todo.append((target, stamp))
    if not todo:
        return 0
    stubs = _stub_torch(cache / "stub")
    with concurrent.futures.ThreadPoolExecutor(len(todo)) as pool:
        results = list(pool.map(lambda t: check(t[0], requirements, stubs), todo))
    status = 0
    for (target, stamp), (ok, detail) in zip(todo, results, strict=True):
        head = f"aarch64 wheels for CPython {target.python} ({target.label})"
        if ok:
            print(f"{head}: {detail}")
            stamp.write_text(detail + "\n")
        else:
            print(f"{me}: {head}: {detail}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
