"""Variants of an export's decoder for ONNX Runtime on a CPU, made once from the export and
kept beside it:

    <export>/variants-<VARIANTS_FORMAT>/back.fused.onnx   float, rewritten (`_graph_rewrites`)
    <export>/variants-<VARIANTS_FORMAT>/back.int8.onnx    its Snake convolutions in int8
                                                          (`_quantise`, `_calibration`)
    <export>/variants-<VARIANTS_FORMAT>/variants.json     what was made, and how far each
                                                          variant's audio is from the float
                                                          graph's

Which one a worker speaks with is chosen when it loads (`_graph_choice`); the export's own
`back.onnx` ("float") is always one of them. Only the decoder changes: the front (durations)
is the export's, so every variant times speech exactly as the float graph does.

The folder's name carries `VARIANTS_FORMAT`, bumped whenever the rewrites, the quantisation
or the calibration text change what a variant computes: a new speechd then builds its
variants anew, and an old folder is never taken for a new one. The export's folder is keyed
by the weights (`_export`), so new weights get new variants too. Where the export's folder
cannot be written, they go to `<cache_dir>/onnx-variants/<export key>-<VARIANTS_FORMAT>/`.

Building needs the `onnx` package (not torch): it runs in a child process (`python -m
speechd.engine._variants`), so the worker never holds the ~250 MB graph protobufs it edits,
in a few minutes on a 2-core CPU (~280 s of CPU; ~3 GB of RSS at the peak). A variant whose
audio is not within its bound of the float graph's on `_calibration.CHECK` is not kept:
`FUSED_BOUND` for the float rewrites (they change rounding only), `INT8_BOUND` for int8 (the
int8 blocks are chosen to fit it); the manifest says why (`not_kept`), and the folder is
kept all the same, so the next start does not build again. When nothing can be built (no
`onnx`, a failure) nothing is kept, the worker speaks with the float graph and says why in
its log, and the next start tries again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final, NamedTuple

from ._export import BACK, FRONT, _locked, _writable_dir
from ._export import MANIFEST as EXPORT_MANIFEST

__all__ = [
    "FUSED_BOUND",
    "GRAPHS",
    "INT8_BOUND",
    "VARIANTS_FORMAT",
    "Variant",
    "ensure_variants",
    "find_variants",
]

log = logging.getLogger("speechd.engine")

VARIANTS_FORMAT: Final = 1
#: The graphs a worker on a CPU may speak with, most exact first.
GRAPHS: Final = ("float", "fused", "int8")
FILES: Final = {"fused": "back.fused.onnx", "int8": "back.int8.onnx"}
MANIFEST: Final = "variants.json"
#: How far (log-spectral distance, dB: `_quality`) a variant's audio may be from the float
#: graph's on the check lines: the float rewrites change rounding only (measured < 0.1 dB);
#: int8 is held to 2.0, so that with the float graph's own ~0.3 dB from torch it stays
#: within 2.5 dB of torch's float32.
FUSED_BOUND: Final = 0.5
INT8_BOUND: Final = 2.0
BUILD_TIMEOUT_S: Final = 1800.0


class Variant(NamedTuple):
    """A decoder graph a worker can speak with."""

    name: str
    """"float", "fused" or "int8"."""
    path: Path
    id: str
    """A digest of the graph's file ("" for the float graph): in the engine's fingerprint,
    so audio of one build never continues another's."""
    distance_db: float
    """Its audio's distance from the float graph's on the check lines (0 for float)."""


def _places(export: Path, cache_dir: Path) -> list[Path]:
    folder = f"variants-{VARIANTS_FORMAT}"
    return [export / folder, cache_dir / "onnx-variants" / f"{export.name}-{VARIANTS_FORMAT}"]


def find_variants(export: Path, cache_dir: Path) -> dict[str, Variant] | None:
    """The variants already made for `export` (a speechd export folder), the float graph
    among them; None when they have not been made."""
    for place in _places(export, cache_dir):
        manifest = place / MANIFEST
        if manifest.is_file():
            return _read(export, place)
    return None


def _read(export: Path, place: Path) -> dict[str, Variant]:
    found = {"float": Variant("float", export / BACK, "", 0.0)}
    made = json.loads((place / MANIFEST).read_text(encoding="utf-8")).get("variants", {})
    for name, entry in made.items():
        path = place / str(entry.get("file", ""))
        if name in FILES and path.is_file():
            found[name] = Variant(name, path, str(entry["id"]), float(entry["distance_db"]))
    return found


def ensure_variants(export: Path, model_root: Path, cache_dir: Path) -> dict[str, Variant]:
    """The variants of `export` (a speechd export folder): found, or built now in a child
    process from the export and the voices in `model_root`. Just the float graph when they
    cannot be built (logged: the worker goes on with it)."""
    found = find_variants(export, cache_dir)
    if found is not None:
        return found
    target = next((p for p in _places(export, cache_dir) if _writable_dir(p.parent)), None)
    if target is None:
        log.warning("graph variants: neither %s nor the cache can be written", export)
        return {"float": Variant("float", export / BACK, "", 0.0)}
    with _locked(target.parent / f".{target.name}.lock"):
        if (target / MANIFEST).is_file():  # another worker built them meanwhile
            return _read(export, target)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            started = time.perf_counter()
            _build_in_child(export, model_root, staging)
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(target)
            os.replace(staging, target)
            log.info("graph variants of %s built in %.0f s", export, time.perf_counter() - started)
            for why in json.loads((target / MANIFEST).read_text(encoding="utf-8"))["not_kept"]:
                log.warning("graph variants: %s: not kept", why)
        except RuntimeError as exc:
            log.warning("graph variants cannot be built (%s): the float graph only", exc)
            return {"float": Variant("float", export / BACK, "", 0.0)}
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return _read(export, target)


def _build_in_child(export: Path, model_root: Path, out: Path) -> None:
    root = str(Path(__file__).resolve().parents[2])  # so the child imports this speechd
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
    }
    argv = [sys.executable, "-m", "speechd.engine._variants", str(export), str(model_root)]
    try:
        done = subprocess.run(
            [*argv, str(out)],
            env=env,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(str(exc)) from exc
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise RuntimeError(lines[-1] if lines else f"exit code {done.returncode}")


# ---------------------------------------------------------------- the child (imports onnx)


def build(export: Path, model_root: Path, out: Path) -> dict[str, Any]:
    """Make the variants of `export` in `out` and write their manifest (in the child)."""
    import numpy as np
    import onnx
    import onnxruntime

    from ._graph_rewrites import optimise
    from ._quality import log_spectral_distance
    from ._quantise import quantised_variant, session_runner

    began = time.perf_counter()
    calibrate, check = decoder_feeds(export, model_root)
    float_graph = session_runner(str(export / BACK))
    reference = [float_graph(feed) for feed in check]
    del float_graph
    model = onnx.load(str(export / BACK))
    rewrites = optimise(model)
    fused = session_runner(model.SerializeToString())
    distance = max(
        log_spectral_distance(fused(feed), expected)
        for feed, expected in zip(check, reference, strict=True)
    )
    del fused
    variants: dict[str, Any] = {}
    why: list[str] = []
    if distance > FUSED_BOUND:  # kept as a finding: the next start does not build again
        why.append(f"the rewritten decoder is {distance:.2f} dB from the float graph")
    else:
        variants["fused"] = _save(model.SerializeToString(), out, "fused", distance)
        variants["fused"]["rewrites"] = rewrites.sites
        made = quantised_variant(
            model, rewrites.snake_convs, calibrate, check, reference, INT8_BOUND
        )
        if made is None:
            why.append(f"no int8 block keeps within {INT8_BOUND} dB of the float graph")
        else:
            quantised, blocks, worst = made
            variants["int8"] = _save(quantised, out, "int8", worst)
            variants["int8"]["blocks"] = [b.rsplit("/", 1)[-1] for b in blocks]
            groups = {c.rsplit("/", 2)[0] for c in rewrites.snake_convs}
            variants["int8"]["of_blocks"] = len(groups)
    manifest = {
        "format": VARIANTS_FORMAT,
        "onnxruntime": str(onnxruntime.__version__),
        "numpy": str(np.__version__),
        "variants": variants,
        "not_kept": why,
        "seconds": round(time.perf_counter() - began, 1),
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def _save(data: bytes, out: Path, name: str, distance: float) -> dict[str, Any]:
    (out / FILES[name]).write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()[:12]
    return {"file": FILES[name], "id": digest, "distance_db": round(distance, 3)}


def decoder_feeds(
    export: Path, model_root: Path
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The decoder's inputs for the calibration and the check lines: each line's phonemes
    through the export's front, with its voice's style, its frames and its seeded noise."""
    import numpy as np
    import onnxruntime as ort

    from ._calibration import CALIBRATE, CHECK, VOICES
    from ._packs import read_pack
    from ._runtime import SAMPLES_PER_FRAME, excitation

    config = json.loads((model_root / "config.json").read_text(encoding="utf-8"))
    vocab: dict[str, int] = config["vocab"]
    installed = sorted(p.stem for p in (model_root / "voices").glob("*.pt"))
    voices = [v for v in VOICES if v in installed] or installed[: len(VOICES)]
    if not voices:
        raise RuntimeError(f"no voices in {model_root / 'voices'}")
    packs = {v: read_pack(model_root / "voices" / f"{v}.pt") for v in voices}

    options = ort.SessionOptions()
    options.log_severity_level = 3
    front = ort.InferenceSession(str(export / FRONT), options, providers=["CPUExecutionProvider"])

    def feed(phonemes: str, voice: str, seed: int) -> dict[str, Any]:
        ids = [vocab[p] for p in phonemes if p in vocab]
        pack = packs[voice]
        style = np.ascontiguousarray(pack[min(len(ids), len(pack)) - 1].reshape(1, -1))
        tokens = np.array([[0, *ids, 0]], dtype=np.int64)
        durations, d, t_en = front.run(
            None, {"input_ids": tokens, "style": style, "speed": np.ones(1, np.float32)}
        )
        frames = np.repeat(np.arange(tokens.shape[1], dtype=np.int64), durations.reshape(-1))
        phase, noise = excitation(seed, frames.size * SAMPLES_PER_FRAME)
        feeds = {"d": d, "t_en": t_en, "frames": frames, "style": style}
        return {**feeds, "phase": phase, "noise": noise}

    calibrate = [
        feed(line.phonemes, voices[i % len(voices)], i) for i, line in enumerate(CALIBRATE)
    ]
    # The check lines with voices in another order: other speakers than they calibrated with.
    check = [
        feed(line.phonemes, voices[(len(voices) - 1 - i) % len(voices)], 100 + i)
        for i, line in enumerate(CHECK)
    ]
    return calibrate, check


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m speechd.engine._variants EXPORT MODEL_DIR OUT", file=sys.stderr)
        return 2
    export = Path(argv[0])
    if not (export / EXPORT_MANIFEST).is_file():
        print(f"{export} is not a speechd export", file=sys.stderr)
        return 2
    try:
        manifest = build(export, Path(argv[1]), Path(argv[2]))
    except Exception as exc:  # reported to the parent as one line
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(manifest))
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    sys.exit(main(sys.argv[1:]))
