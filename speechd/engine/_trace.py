"""Tracing the ONNX export (`_export` says where it lives and when it is made): the two
halves of `_split` and their batched forms (`_split_batch`), each checked against torch on a
real sentence before the manifest is written. Runs in the export's child process only
(`python -m speechd.engine._trace CONFIG WEIGHTS OUT_DIR`): it imports torch, kokoro and
onnxruntime.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from ._export import (
    BACK,
    BACK_BATCH,
    CHECK_PHONEMES,
    CHECK_RMS,
    EXPORT_FORMAT,
    FRONT,
    FRONT_BATCH,
    MANIFEST,
    OPSET,
)

__all__ = ["export_graphs", "main"]


def export_graphs(config: Path, weights: Path, out: Path) -> dict[str, Any]:
    """Export the two halves of `_split` and their batched forms (`_split_batch`) to `out`,
    check them against torch, and write the manifest."""
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
    """The export's child: the graphs of CONFIG and WEIGHTS exported to OUT_DIR, the manifest
    printed; a failure reported to the parent as one line on stderr."""
    if len(argv) != 3:
        print("usage: python -m speechd.engine._trace CONFIG WEIGHTS OUT_DIR", file=sys.stderr)
        return 2
    try:
        manifest = export_graphs(Path(argv[0]), Path(argv[1]), Path(argv[2]))
    except Exception as exc:  # reported to the parent as one line
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(manifest))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
