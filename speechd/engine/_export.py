"""The ONNX export of a model folder's weights: made once, cached by the weights' hash.

    <model_dir>/speechd-onnx/<key>/front.onnx        tokens -> durations, text encodings
    <model_dir>/speechd-onnx/<key>/back.onnx         aligned encodings + noise -> audio
    <model_dir>/speechd-onnx/<key>/front_batch.onnx  the same for a padded batch (`_split_batch`)
    <model_dir>/speechd-onnx/<key>/back_batch.onnx
    <model_dir>/speechd-onnx/<key>/export.json       what made it

One chunk at a time runs the single graphs, exactly as before batching existed (they are
faster alone: no masks); several chunks in one pass run the batched pair. Exports of an
earlier `EXPORT_FORMAT` (1: no batched graphs) have another key, so they are never found and
taken for batched ones; given by hand (`--onnx-model DIR`) they still run, one chunk at a
time.

`key` is a hash of config.json, the weights file and `EXPORT_FORMAT` (bumped whenever
`_split` changes what the graphs compute), so new weights, a new config or a new speechd
graph layout each get a fresh export, and an unchanged folder reuses the one it has. When the
model folder cannot be written (a read-only mount, a shared copy), the export goes to
`<cache_dir>/onnx/<key>/` instead (`~/.cache/speechd` by default).

The export itself needs torch and kokoro (the weights are a torch state dict). It runs in a
child process (`python -m speechd.engine._trace`, which traces), so the worker that
asked for it never imports torch and stays small: ~30-60 s (half of it the batched graphs)
and ~1.5 GB of RSS once, on a 2-core CPU. Concurrent
workers wait on one lock file and the first one's export; a half-written export is never
seen (it is renamed into place when complete).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Final

from speechd.errors import ModelUnavailable

from ._files import ModelFolder

__all__ = [
    "BACK",
    "BACK_BATCH",
    "EXPORT_FORMAT",
    "FRONT",
    "FRONT_BATCH",
    "MANIFEST",
    "default_cache_dir",
    "ensure_export",
    "export_key",
    "find_export",
]

EXPORT_FORMAT: Final = 2
FRONT: Final = "front.onnx"
BACK: Final = "back.onnx"
#: The batched graphs (from EXPORT_FORMAT 2 on).
FRONT_BATCH: Final = "front_batch.onnx"
BACK_BATCH: Final = "back_batch.onnx"
MANIFEST: Final = "export.json"
FOLDER: Final = "speechd-onnx"
OPSET: Final = 17
#: The sentence the graphs are traced and checked with ("The old man walked slowly along the
#: quiet beach.").
CHECK_PHONEMES: Final = "ðə ˈOld mˈæn wˈɔkt slˈOli əlˈɔŋ ðə kwˈIət bˈiʧ."  # noqa: RUF001
#: How far (relative RMS) the exported audio may be from torch's on the check input.
CHECK_RMS: Final = 0.05
#: The longest an export may take (a slow ARM CPU); far more than the ~60 s it takes here.
EXPORT_TIMEOUT_S: Final = 1800.0


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/speechd`, else `~/.cache/speechd`."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "speechd"


def export_key(folder: ModelFolder) -> str:
    """A hash of what the export is made from (config, weights, graph layout)."""
    digest = hashlib.sha256(f"speechd-onnx/{EXPORT_FORMAT}\n".encode())
    for path in (folder.config, folder.weights):
        with open(path, "rb") as file:
            for block in iter(lambda file=file: file.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:20]


def _places(folder: ModelFolder, cache_dir: Path, key: str) -> list[Path]:
    return [folder.root / FOLDER / key, cache_dir / "onnx" / key]


def _complete(path: Path) -> bool:
    return all((path / n).is_file() for n in (FRONT, BACK, FRONT_BATCH, BACK_BATCH, MANIFEST))


def find_export(folder: ModelFolder, cache_dir: Path, key: str | None = None) -> Path | None:
    """The folder of an existing export of these weights, or None."""
    key = key or export_key(folder)
    return next((p for p in _places(folder, cache_dir, key) if _complete(p)), None)


def _writable_dir(path: Path) -> bool:
    """Whether files can be made in `path` (created if need be): tried, not guessed."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            return True
    except OSError:
        return False


def ensure_export(folder: ModelFolder, cache_dir: Path) -> Path:
    """The export of `folder`'s weights: found, or made now (in a child process).

    ModelUnavailable when it can be neither found nor made (torch or kokoro missing, weights
    that do not load, no writable place)."""
    key = export_key(folder)
    found = find_export(folder, cache_dir, key)
    if found is not None:
        return found
    target = next((p for p in _places(folder, cache_dir, key) if _writable_dir(p.parent)), None)
    if target is None:
        raise ModelUnavailable(
            f"Cannot write the ONNX export of {str(folder.root)!r}: neither that folder nor "
            f"{str(cache_dir)!r} is writable (set --cache-dir)."
        )
    with _locked(target.parent / f".{key}.lock"):
        if _complete(target):  # another worker made it while this one waited
            return target
        staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=target.parent))
        try:
            _export_in_child(folder, staging)
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(target)  # an incomplete leftover
            os.replace(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


@contextlib.contextmanager
def _locked(path: Path) -> Any:
    with open(path, "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _export_in_child(folder: ModelFolder, out: Path) -> None:
    root = str(Path(__file__).resolve().parents[2])  # so the child imports this speechd
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
    }
    argv = [
        sys.executable,
        "-m",
        "speechd.engine._trace",
        str(folder.config),
        str(folder.weights),
        str(out),
    ]
    try:
        done = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ModelUnavailable(f"The ONNX export of {str(folder.root)!r} failed: {exc}") from exc
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        why = lines[-1] if lines else f"exit code {done.returncode}"
        raise ModelUnavailable(f"The ONNX export of {str(folder.root)!r} failed: {why}")
