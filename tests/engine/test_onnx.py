"""The ONNX Runtime engine's own concerns: the export (made once, found by the weights' hash,
placed where it can be written), foreign exports, `auto`, and the GPU provider settings."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from speechd.engine import EngineConfig, _export, _onnx, load_engine
from speechd.engine._files import open_model_folder
from speechd.errors import ModelUnavailable
from tests.support.tiny_model import export_tiny, make_tiny_model_dir


@pytest.fixture
def copy_of_tiny(tiny_model_dir: Path, tmp_path: Path) -> Path:
    """A fresh model folder with the tiny weights and no export yet."""
    root = tmp_path / "model"
    root.mkdir()
    for name in ("config.json", "kokoro-v1_0.pth"):
        shutil.copyfile(tiny_model_dir / name, root / name)
    shutil.copytree(tiny_model_dir / "voices", root / "voices")
    return root


@pytest.fixture
def export_in_process(tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The engine's export step, standing in for the child process: the session's one export
    of the tiny weights (`export_tiny`: the same weights and config, so the same files) is
    copied where the engine asked for it, so no test exports again (an export of the tiny
    model takes ~20-30 s on 2 cores; the child itself: the slow test at the end). Returns
    where it was asked to export to."""
    made: list[Path] = []
    exported = export_tiny(tiny_model_dir)

    def in_process(folder: Any, out: Path) -> None:
        assert _export.export_key(folder) == exported.name  # the same weights and config
        made.append(out)
        shutil.copytree(exported, out, dirs_exist_ok=True)

    monkeypatch.setattr(_export, "_export_in_child", in_process)
    return made


def test_the_export_is_made_once_beside_the_weights_and_found_again(
    copy_of_tiny: Path, export_in_process: list[Path], tmp_path: Path
) -> None:
    config = EngineConfig(
        model_dir=str(copy_of_tiny), engine="onnx", cache_dir=str(tmp_path / "cache")
    )
    first = load_engine(config)
    key = _export.export_key(open_model_folder(copy_of_tiny))
    place = copy_of_tiny / "speechd-onnx" / key
    assert (place / "front.onnx").is_file() and (place / "back.onnx").is_file()
    assert len(export_in_process) == 1
    assert not (tmp_path / "cache" / "onnx").exists()
    second = load_engine(config)  # the same weights: the same export, not a new one
    assert len(export_in_process) == 1
    chunk = first.plan("Hello there.", "af_heart")[0]
    a, b = (e.synthesize(chunk, "af_heart", 1.0, seed=2).pcm for e in (first, second))
    assert a.tobytes() == b.tobytes()


def test_new_weights_or_config_get_a_new_key(copy_of_tiny: Path) -> None:
    before = _export.export_key(open_model_folder(copy_of_tiny))
    weights = copy_of_tiny / "kokoro-v1_0.pth"
    weights.write_bytes(weights.read_bytes() + b"\0")
    after_weights = _export.export_key(open_model_folder(copy_of_tiny))
    config = copy_of_tiny / "config.json"
    config.write_text(config.read_text() + " ")
    after_config = _export.export_key(open_model_folder(copy_of_tiny))
    assert len({before, after_weights, after_config}) == 3


def test_a_read_only_model_folder_exports_into_the_cache(
    copy_of_tiny: Path,
    export_in_process: list[Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    writable = _export._writable_dir
    monkeypatch.setattr(
        _export, "_writable_dir", lambda path: copy_of_tiny not in path.parents and writable(path)
    )
    cache = tmp_path / "cache"
    engine = load_engine(
        EngineConfig(model_dir=str(copy_of_tiny), engine="onnx", cache_dir=str(cache))
    )
    key = _export.export_key(open_model_folder(copy_of_tiny))
    assert (cache / "onnx" / key / "back.onnx").is_file()
    assert not (copy_of_tiny / "speechd-onnx").exists()
    assert engine.runtime == "onnx"


def test_nowhere_to_write_the_export_is_model_unavailable(
    copy_of_tiny: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(_export, "_writable_dir", lambda path: False)
    with pytest.raises(ModelUnavailable, match="--cache-dir"):
        load_engine(
            EngineConfig(model_dir=str(copy_of_tiny), engine="onnx", cache_dir=str(tmp_path))
        )


def test_auto_takes_onnx_runtime_when_it_can_and_torch_when_it_cannot(
    tiny_model_dir: Path, tiny_onnx_engine: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = EngineConfig(model_dir=str(tiny_model_dir), device="cpu")
    assert config.engine == "auto"
    assert load_engine(config).runtime == "onnx"  # installed, and the export is there
    monkeypatch.setattr(_onnx, "onnx_available", lambda: False)
    assert load_engine(config).runtime == "torch"


def test_auto_on_an_nvidia_machine_takes_torch_over_a_cpu_only_onnx_runtime(
    tiny_model_dir: Path, tiny_onnx_engine: object, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The README's first command installs the `onnx` extra (CPU-only onnxruntime) on every
    machine: where there is an NVIDIA GPU, `auto` must still give the GPU to torch."""
    import onnxruntime

    from speechd.engine import _loading

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this ONNX Runtime has CUDA")
    monkeypatch.setattr(_loading, "_gpu_present", lambda: True)  # the driver says so
    caplog.set_level("INFO", logger="speechd.engine")
    config = EngineConfig(model_dir=str(tiny_model_dir))
    assert (config.engine, config.device) == ("auto", "auto")
    assert load_engine(config).runtime == "torch"
    assert "no CUDA provider" in caplog.text
    assert load_engine(msgspec.structs.replace(config, device="cpu")).runtime == "onnx"


def test_auto_falls_back_to_torch_when_the_export_fails(
    copy_of_tiny: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def failing(folder: Any, out: Path) -> None:
        raise ModelUnavailable("the exporter broke")

    monkeypatch.setattr(_export, "_export_in_child", failing)
    engine = load_engine(EngineConfig(model_dir=str(copy_of_tiny), device="cpu"))
    assert engine.runtime == "torch"
    assert "the exporter broke" in caplog.text
    with pytest.raises(ModelUnavailable, match="the exporter broke"):
        load_engine(EngineConfig(model_dir=str(copy_of_tiny), engine="onnx"))


def test_an_onnx_model_that_does_not_exist_is_model_unavailable(tiny_model_dir: Path) -> None:
    with pytest.raises(ModelUnavailable, match="does not exist"):
        load_engine(
            EngineConfig(model_dir=str(tiny_model_dir), engine="onnx", onnx_model="/no/k.onnx")
        )


def test_cuda_without_a_cuda_provider_fails_before_any_export(
    copy_of_tiny: Path, export_in_process: list[Path]
) -> None:
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this ONNX Runtime has CUDA")
    with pytest.raises(ModelUnavailable, match="onnxruntime-gpu"):
        load_engine(EngineConfig(model_dir=str(copy_of_tiny), engine="onnx", device="cuda"))
    assert export_in_process == []


# ------------------------------------------------------------------ foreign exports


def _foreign_graph(path: Path, *, durations: bool) -> Path:
    """A stand-in for a Kokoro export in the kokoro-onnx layout (tokens, style, speed -> audio
    [, durations]): 600 samples of a constant per token, one frame per token."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Shape", ["tokens"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["count"]),
        helper.make_node("Mul", ["count", "frame"], ["samples"]),
        helper.make_node(
            "ConstantOfShape",
            ["samples"],
            ["audio"],
            value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.25]),
        ),
    ]
    outputs = [helper.make_tensor_value_info("audio", TensorProto.FLOAT, ["n"])]
    if durations:
        nodes.append(
            helper.make_node(
                "ConstantOfShape",
                ["count"],
                ["durations"],
                value=helper.make_tensor("d", TensorProto.INT64, [1], [1]),
            )
        )
        outputs.append(helper.make_tensor_value_info("durations", TensorProto.INT64, ["t"]))
    graph = helper.make_graph(
        nodes,
        "kokoro-stand-in",
        [
            helper.make_tensor_value_info("tokens", TensorProto.INT64, [1, "t"]),
            helper.make_tensor_value_info("style", TensorProto.FLOAT, [1, 256]),
            helper.make_tensor_value_info("speed", TensorProto.FLOAT, [1]),
        ],
        outputs,
        initializer=[
            helper.make_tensor("one", TensorProto.INT64, [1], [1]),
            helper.make_tensor("frame", TensorProto.INT64, [1], [600]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("durations", [True, False], ids=["with-durations", "audio-only"])
def test_a_foreign_export_is_run_as_it_is(
    tiny_model_dir: Path, tmp_path: Path, durations: bool
) -> None:
    path = _foreign_graph(tmp_path / "kokoro.onnx", durations=durations)
    engine = load_engine(
        EngineConfig(model_dir=str(tiny_model_dir), engine="onnx", onnx_model=str(path))
    )
    assert "seeds ignored" in engine.detail
    # Its weights are the file's: the fingerprint (what a resumed cast compares) names it.
    assert engine.fingerprint.endswith(f":onnx:kokoro.onnx:{path.stat().st_size}")
    chunk = engine.plan("Hello there.", "af_heart")[0]
    result = engine.synthesize(chunk, "af_heart", 1.0, seed=1)
    tokens = len(result.tokens) + 2
    assert result.durations == ((1,) * tokens if durations else ())
    # A constant "voice" from the first sample to the last: trimmed at the end marker and a
    # sentence's pause, or by the signal alone.
    assert len(result.pcm) <= tokens * 600 and np.isclose(result.pcm[len(result.pcm) // 2], 0.25)
    # Word timing follows the durations it gives, and there are none without them.
    assert bool(result.words) == durations


def test_a_graph_that_is_not_kokoro_is_refused(tiny_model_dir: Path, tmp_path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "other",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "other.onnx"))
    with pytest.raises(ModelUnavailable, match="not a Kokoro ONNX export"):
        load_engine(
            EngineConfig(
                model_dir=str(tiny_model_dir),
                engine="onnx",
                onnx_model=str(tmp_path / "other.onnx"),
            )
        )


# ------------------------------------------------------------------ GPU settings (no GPU here)


class _Session:
    """Records how a session was asked for, and claims the providers it was given."""

    made: list[tuple[str, list[Any]]] = []

    def __init__(self, path: str, options: object, providers: list[Any]) -> None:
        self.made.append((Path(path).name, providers))
        self._providers = [p if isinstance(p, str) else p[0] for p in providers]

    def get_providers(self) -> list[str]:
        return self._providers


def test_cuda_runs_on_tensorrt_then_cuda_with_settings_for_changing_shapes(
    tiny_model_dir: Path, tiny_onnx_engine: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import onnxruntime

    all_three = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: all_three)
    monkeypatch.setattr(onnxruntime, "InferenceSession", _Session)
    _Session.made = []
    export = export_tiny(tiny_model_dir)
    runtime = _onnx.load_onnx_runtime(export, "cuda:1", None, trt_cache=tmp_path / "trt")
    assert runtime.device == "cuda:1"
    names = [
        (name, [p if isinstance(p, str) else p[0] for p in chain]) for name, chain in _Session.made
    ]
    assert names == [
        ("front.onnx", all_three),
        ("back.onnx", all_three),
        ("back.onnx", all_three[1:]),  # chunks longer than TensorRT's profile
    ]
    trt = dict(_Session.made[1][1][0][1])
    assert trt["device_id"] == "1" and trt["trt_engine_cache_enable"] == "True"
    assert trt["trt_engine_cache_path"] == str(tmp_path / "trt")
    assert trt["trt_profile_max_shapes"].split(",") == [
        "d:1x512x640",
        "t_en:1x512x512",
        f"frames:{_onnx.TRT_MAX_FRAMES}",
        f"noise:1x{_onnx.TRT_MAX_FRAMES * 600}x1",
    ]
    cuda = dict(_Session.made[1][1][1][1])
    assert cuda == {
        "device_id": "1",
        "cudnn_conv_algo_search": "HEURISTIC",
        "arena_extend_strategy": "kSameAsRequested",
    }
    # The batched graphs open when batches are announced (or at the first), on CUDA without
    # TensorRT (no profile for every batch size and length).
    runtime.prepare_batch(8)
    batched = [(name, [p if isinstance(p, str) else p[0] for p in chain])
               for name, chain in _Session.made[3:]]  # fmt: skip
    assert batched == [("front_batch.onnx", all_three[1:]), ("back_batch.onnx", all_three[1:])]
    runtime.prepare_batch(16)
    assert len(_Session.made) == 5  # already open


def test_auto_device_stays_on_the_cpu_when_the_cuda_provider_does_not_start(
    tiny_model_dir: Path, tiny_onnx_engine: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import onnxruntime

    class CpuOnly(_Session):
        def get_providers(self) -> list[str]:
            return ["CPUExecutionProvider"]  # what ONNX Runtime reports when CUDA fails to load

    monkeypatch.setattr(
        onnxruntime,
        "get_available_providers",
        lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"],
    )
    monkeypatch.setattr(onnxruntime, "InferenceSession", CpuOnly)
    export = export_tiny(tiny_model_dir)
    CpuOnly.made = []
    assert _onnx.load_onnx_runtime(export, "auto", None, trt_cache=tmp_path).device == "cpu"
    assert [chain for _, chain in CpuOnly.made[-2:]] == [["CPUExecutionProvider"]] * 2
    with pytest.raises(ModelUnavailable, match="could not start its CUDA provider"):
        _onnx.load_onnx_runtime(export, "cuda", None, trt_cache=tmp_path)

    from onnxruntime.capi.onnxruntime_pybind11_state import Fail

    class Refusing(_Session):
        def __init__(self, path: str, options: object, providers: list[Any]) -> None:
            if providers != ["CPUExecutionProvider"]:
                raise Fail("CUDA failure 100: no CUDA-capable device is detected")
            super().__init__(path, options, providers)

    monkeypatch.setattr(onnxruntime, "InferenceSession", Refusing)
    assert _onnx.load_onnx_runtime(export, "auto", None, trt_cache=tmp_path).device == "cpu"
    with pytest.raises(ModelUnavailable, match="no CUDA-capable device"):
        _onnx.load_onnx_runtime(export, "cuda", None, trt_cache=tmp_path)


# ------------------------------------------------------------------ the real export step


@pytest.mark.slow
def test_the_export_runs_in_a_child_process_and_fails_with_one_line(tmp_path: Path) -> None:
    root = make_tiny_model_dir(tmp_path / "model", ("af_heart",))
    folder = open_model_folder(root)
    exported = _export.ensure_export(folder, tmp_path / "cache")
    assert exported.parent == root / "speechd-onnx"
    assert _export.find_export(folder, tmp_path / "cache") == exported
    broken = make_tiny_model_dir(tmp_path / "broken", ("af_heart",))
    (broken / "kokoro-v1_0.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(ModelUnavailable) as caught:
        _export.ensure_export(open_model_folder(broken), tmp_path / "cache")
    assert "\n" not in caught.value.message and "failed" in caught.value.message
    assert not list((broken / "speechd-onnx").glob("*/back.onnx"))  # nothing half-made stays
