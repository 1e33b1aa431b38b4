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
child process (`python -m speechd.engine._export`), so the worker that asked for it never
imports torch and stays small: ~30 s and ~1.5 GB of RSS once, on a 2-core CPU. Concurrent
workers wait on one lock file and the first one's export; a half-written export is never
seen (it is renamed into place when complete).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
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
#: The longest an export may take (a slow ARM CPU); far more than the ~30 s it takes here.
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
        "speechd.engine._export",
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


# ---------------------------------------------------------------- the child (imports torch)


def export(config: Path, weights: Path, out: Path) -> dict[str, Any]:
    """Export the two halves of `_split` to `out` and check them against torch."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation, its tracing
        return _export(config, weights, out)


def _export(config: Path, weights: Path, out: Path) -> dict[str, Any]:
    import onnxruntime
    import torch
    from kokoro import KModel

    from ._packs import read_pack
    from ._split import split_model
    from ._split_batch import split_batch_model

    began = time.perf_counter()
    kmodel = KModel(
        repo_id="hexgrad/Kokoro-82M", config=str(config), model=str(weights), disable_complex=True
    ).eval()
    front, back = split_model(kmodel)
    front_batch, back_batch = split_batch_model(kmodel, back)
    generator = torch.Generator().manual_seed(0)
    # Trace and check on speech-like input: a real sentence's phonemes and one of the
    # folder's voices (random tokens and styles make F0 curves no voice has, where the
    # decoder's rounding grows to several percent on torch alone).
    ids = [kmodel.vocab[p] for p in CHECK_PHONEMES if p in kmodel.vocab]
    width = 2 * int(json.loads(Path(config).read_text(encoding="utf-8"))["style_dim"])
    style = torch.randn(1, width, generator=generator) * 0.1
    for pack in sorted((Path(config).parent / "voices").glob("*.pt"))[:1]:
        with contextlib.suppress(ValueError, OSError):
            rows = read_pack(pack).reshape(-1, width)
            style = torch.from_numpy(rows[min(len(CHECK_PHONEMES), len(rows)) - 1][None].copy())
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    error, channels = _export_single(front, back, ids, style, out, options)
    # The batch the batched graphs are traced with: the sentence, and its first half read
    # faster with a slightly other style (two rows of other lengths, speeds and styles).
    error_batch = _export_batch(front_batch, back_batch, ids, style, out, options)
    manifest = {
        "format": EXPORT_FORMAT,
        "opset": OPSET,
        "torch": str(torch.__version__),
        "onnxruntime": str(onnxruntime.__version__),
        "weights": str(weights),
        "channels": channels,
        "batch": {"front": FRONT_BATCH, "back": BACK_BATCH},
        "seconds": round(time.perf_counter() - began, 1),
        "check_error": error,
        "check_error_batch": error_batch,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def _relative_rms(got: Any, expected: Any) -> float:
    import numpy as np

    rms = float(np.sqrt(np.mean(np.asarray(expected, dtype=np.float64) ** 2)))
    diff = np.asarray(got, dtype=np.float64) - np.asarray(expected, dtype=np.float64)
    return float(np.sqrt(np.mean(diff**2))) / max(rms, 1e-9)


def _export_single(
    front: Any, back: Any, ids: list[int], style: Any, out: Path, options: Any
) -> tuple[float, dict[str, int]]:
    """front.onnx and back.onnx (batch 1), checked against torch: their audio's error, and
    the channels of `d` and `t_en` (TensorRT's shape profiles need them)."""
    import numpy as np
    import onnxruntime
    import torch

    from ._runtime import SAMPLES_PER_FRAME, excitation

    input_ids = torch.tensor([[0, *ids, 0]], dtype=torch.long)
    tokens = input_ids.shape[1]
    speed = torch.ones(1)
    with torch.inference_mode():
        durations, d, t_en = front(input_ids, style, speed)
    frames = torch.repeat_interleave(torch.arange(tokens), durations)
    phase, noise = (torch.from_numpy(a) for a in excitation(0, frames.numel() * SAMPLES_PER_FRAME))
    with torch.no_grad():
        audio = back(d, t_en, frames, style, phase, noise)
        torch.onnx.export(
            front,
            (input_ids, style, speed),
            str(out / FRONT),
            dynamo=False,
            opset_version=OPSET,
            input_names=["input_ids", "style", "speed"],
            output_names=["durations", "d", "t_en"],
            dynamic_axes={
                "input_ids": {1: "tokens"},
                "durations": {0: "tokens"},
                "d": {1: "tokens"},
                "t_en": {2: "tokens"},
            },
        )
        torch.onnx.export(
            back,
            (d, t_en, frames, style, phase, noise),
            str(out / BACK),
            dynamo=False,
            opset_version=OPSET,
            input_names=["d", "t_en", "frames", "style", "phase", "noise"],
            output_names=["audio"],
            dynamic_axes={
                "d": {1: "tokens"},
                "t_en": {2: "tokens"},
                "frames": {0: "frames"},
                "noise": {1: "samples"},
                "audio": {0: "samples"},
            },
        )
    # The graphs must compute what torch does: the same durations, and the same audio up to
    # float rounding. The decoder turns F0 into phase by a cumulative sum and a sine, which
    # amplifies rounding (on real speech torch's own float32 is 0.6% RMS from float64, ONNX
    # Runtime's 0.9%), so audio is compared by RMS; a mistraced graph is off by ~100%.
    cpu = ["CPUExecutionProvider"]
    got_durations, got_d, got_t_en = onnxruntime.InferenceSession(
        str(out / FRONT), options, providers=cpu
    ).run(None, {"input_ids": input_ids.numpy(), "style": style.numpy(), "speed": speed.numpy()})
    (got_audio,) = onnxruntime.InferenceSession(str(out / BACK), options, providers=cpu).run(
        None,
        {
            "d": got_d,
            "t_en": got_t_en,
            "frames": frames.numpy(),
            "style": style.numpy(),
            "phase": phase.numpy(),
            "noise": noise.numpy(),
        },
    )
    expected = audio.numpy()
    if not np.array_equal(got_durations, durations.numpy()) or got_audio.shape != expected.shape:
        raise RuntimeError("the exported graphs disagree with torch on durations")
    error = _relative_rms(got_audio, expected)
    if not error < CHECK_RMS:
        raise RuntimeError(f"the exported graphs disagree with torch on audio ({error:.1e} RMS)")
    return error, {"d": int(d.shape[2]), "t_en": int(t_en.shape[1])}


def _export_batch(
    front: Any, back: Any, ids: list[int], style: Any, out: Path, options: Any
) -> float:
    """front_batch.onnx and back_batch.onnx, traced on a batch of two and checked against
    torch on a batch of three (other lengths, so nothing of the trace's shapes stuck); the
    largest error of an item's audio."""
    import numpy as np
    import onnxruntime
    import torch

    from ._runtime import Request, infer_batch_in_two_stages

    class Torch:
        def front_batch(self, *args: Any) -> Any:  # input_ids, lengths, style, speed
            self.front_args = args
            durations, d, t_en = front(*(torch.from_numpy(a) for a in args))
            return durations.numpy(), (d, t_en)

        def back_batch(self, state: Any, *args: Any) -> Any:
            d, t_en = state
            self.back_args = (d.numpy(), t_en.numpy(), *args)
            tensors = [torch.from_numpy(a) for a in args]
            return back(d, t_en, *tensors).numpy()

    class Onnx:
        def __init__(self) -> None:
            cpu = ["CPUExecutionProvider"]
            session = onnxruntime.InferenceSession
            self.front = session(str(out / FRONT_BATCH), options, providers=cpu)
            self.back = session(str(out / BACK_BATCH), options, providers=cpu)

        def front_batch(self, input_ids: Any, lengths: Any, style: Any, speed: Any) -> Any:
            feeds = {"input_ids": input_ids, "lengths": lengths, "style": style, "speed": speed}
            durations, d, t_en = self.front.run(None, feeds)
            return durations, (d, t_en)

        def back_batch(self, state: Any, *args: Any) -> Any:
            names = ("frames", "frame_lengths", "style", "phase", "noise")
            feeds = {"d": state[0], "t_en": state[1], **dict(zip(names, args, strict=True))}
            (audio,) = self.back.run(None, feeds)
            return audio

    other = (style * 0.9).numpy()
    traced = [Request(ids, style.numpy(), 1.0, 0), Request(ids[: len(ids) // 2], other, 1.25, 1)]
    tracer = Torch()
    with torch.no_grad():
        infer_batch_in_two_stages(tracer, traced)
        front_args = [torch.from_numpy(a) for a in tracer.front_args]
        back_args = [torch.from_numpy(a) for a in tracer.back_args]
        batch = {0: "batch"}
        torch.onnx.export(
            front,
            tuple(front_args),
            str(out / FRONT_BATCH),
            dynamo=False,
            opset_version=OPSET,
            input_names=["input_ids", "lengths", "style", "speed"],
            output_names=["durations", "d", "t_en"],
            dynamic_axes={
                "input_ids": {0: "batch", 1: "tokens"},
                "lengths": batch,
                "style": batch,
                "speed": batch,
                "durations": {0: "batch", 1: "tokens"},
                "d": {0: "batch", 1: "tokens"},
                "t_en": {0: "batch", 2: "tokens"},
            },
        )
        torch.onnx.export(
            back,
            tuple(back_args),
            str(out / BACK_BATCH),
            dynamo=False,
            opset_version=OPSET,
            input_names=["d", "t_en", "frames", "frame_lengths", "style", "phase", "noise"],
            output_names=["audio"],
            dynamic_axes={
                "d": {0: "batch", 1: "tokens"},
                "t_en": {0: "batch", 2: "tokens"},
                "frames": {0: "batch", 1: "frames"},
                "frame_lengths": batch,
                "style": batch,
                "phase": batch,
                "noise": {0: "batch", 1: "samples"},
                "audio": {0: "batch", 1: "samples"},
            },
        )
    checked = [
        Request(ids[: len(ids) // 3], other, 0.8, 2),
        Request(ids, style.numpy(), 1.0, 3),
        Request(ids[len(ids) // 2 :], style.numpy(), 1.1, 4),
    ]
    with torch.no_grad():
        expected = infer_batch_in_two_stages(Torch(), checked)
    got = infer_batch_in_two_stages(Onnx(), checked)
    errors = []
    for mine, theirs in zip(got, expected, strict=True):
        if not np.array_equal(mine.durations, theirs.durations):
            raise RuntimeError("the exported batched graphs disagree with torch on durations")
        errors.append(_relative_rms(mine.audio, theirs.audio))
    if not max(errors) < CHECK_RMS:
        raise RuntimeError(
            f"the exported batched graphs disagree with torch on audio ({max(errors):.1e} RMS)"
        )
    return max(errors)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m speechd.engine._export CONFIG WEIGHTS OUT_DIR", file=sys.stderr)
        return 2
    try:
        manifest = export(Path(argv[0]), Path(argv[1]), Path(argv[2]))
    except Exception as exc:  # reported to the parent as one line
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(manifest))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
