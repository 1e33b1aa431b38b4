"""`--device`: auto, cpu, cuda and cuda:N, parsed torch-free and resolved against what torch
sees (a stand-in torch here, so the CUDA answers are tested on a machine without a GPU), and
a clear error on this machine, which has no CUDA."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest

from speechd.cli import main
from speechd.config import SettingsError, load_settings
from speechd.engine import EngineConfig, device_name, load_engine, parse_device
from speechd.engine._device import resolve_device
from speechd.errors import ModelUnavailable


@pytest.mark.parametrize(
    ("given", "canonical"),
    [("auto", "auto"), ("CPU", "cpu"), (" cuda ", "cuda"), ("cuda:0", "cuda:0"),
     ("cuda:3", "cuda:3"), ("CUDA:01", "cuda:1")],
)  # fmt: skip
def test_devices_parse_to_one_spelling(given: str, canonical: str) -> None:
    assert parse_device(given) == canonical


@pytest.mark.parametrize(
    "bad", ["", "gpu0", "cuda:", "cuda:-1", "cuda:x", "cuda:1234", "mps", "cuda0"]
)
def test_anything_else_says_what_is_accepted(bad: str) -> None:
    with pytest.raises(ValueError, match=r"auto, cpu, cuda or cuda:N"):
        parse_device(bad)


def test_settings_take_cuda_n_from_flags_and_env() -> None:
    assert load_settings({"device": "cuda:1"}, {}).device == "cuda:1"
    assert load_settings({}, {"SPEECHD_DEVICE": "CUDA:2"}).device == "cuda:2"
    with pytest.raises(SettingsError, match="--device / SPEECHD_DEVICE: 'gpu' is not a device"):
        load_settings({}, {"SPEECHD_DEVICE": "gpu"})


def test_the_engine_config_checks_the_device_on_the_wire() -> None:
    config = msgspec.json.decode(b'{"device": "cuda:2"}', type=EngineConfig)
    assert config.device == "cuda:2"
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(b'{"device": "cuda:two"}', type=EngineConfig)


def test_the_cli_refuses_a_bad_device_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["worker", "--device", "tpu"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "'tpu' is not a device: use auto, cpu, cuda or cuda:N" in err
    assert "Traceback" not in err


def _torch(*, devices: int, built: str | None = "12.4") -> Any:
    """The parts of torch that resolve_device reads."""
    chosen: list[int] = []
    cuda = SimpleNamespace(
        is_available=lambda: devices > 0,
        device_count=lambda: devices,
        current_device=lambda: 0,
        set_device=chosen.append,
        chosen=chosen,
    )
    return SimpleNamespace(cuda=cuda, version=SimpleNamespace(cuda=built), __version__="2.13.0")


def test_cuda_devices_resolve_to_an_index_and_become_current() -> None:
    torch = _torch(devices=2)
    assert resolve_device("cuda", torch) == "cuda:0"
    assert resolve_device("cuda:1", torch) == "cuda:1"
    assert resolve_device("auto", torch) == "cuda:0"
    assert torch.cuda.chosen == [0, 1, 0]
    assert resolve_device("cpu", torch) == "cpu"


def test_auto_without_cuda_is_the_cpu() -> None:
    assert resolve_device("auto", _torch(devices=0)) == "cpu"


def test_a_device_index_past_the_last_names_the_ones_there_are() -> None:
    with pytest.raises(ModelUnavailable) as caught:
        resolve_device("cuda:2", _torch(devices=2))
    assert caught.value.message == (
        "--device cuda:2 was asked for, but this machine has 2 CUDA devices (cuda:0 to cuda:1)."
    )


@pytest.mark.parametrize(
    ("built", "why"),
    [(None, "this torch (2.13.0) was built without CUDA"), ("12.4", "sees no CUDA device")],
)
def test_cuda_absent_says_why(built: str | None, why: str) -> None:
    with pytest.raises(ModelUnavailable, match="CUDA is not available here") as caught:
        resolve_device("cuda:0", _torch(devices=0, built=built))
    assert why in caught.value.message
    assert "\n" not in caught.value.message


def test_cuda_n_on_this_machine_fails_the_load_in_one_line(tiny_model_dir: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(ModelUnavailable) as caught:
        load_engine(EngineConfig(model_dir=str(tiny_model_dir), device="cuda:1"))
    assert caught.value.message.startswith("--device cuda:1 was asked for, but CUDA is not")
    assert "\n" not in caught.value.message


def test_the_cpu_has_a_name() -> None:
    assert isinstance(device_name("cpu", None), str)
    assert device_name("cuda:0", None) == ""  # no torch: nothing to ask


def test_settings_take_the_idle_unload_and_the_memory_budget_from_flags_and_env() -> None:
    settings = load_settings({"idle_unload": "5m", "max_device_memory": "2G"}, {})
    assert settings.idle_unload == 300.0 and settings.max_device_memory == 2 << 30
    env = {"SPEECHD_IDLE_UNLOAD": "90", "SPEECHD_MAX_DEVICE_MEMORY": "512MiB"}
    settings = load_settings({}, env)
    assert settings.idle_unload == 90.0 and settings.max_device_memory == 512 << 20
    worker = settings.worker_config()
    assert worker.idle_unload_s == 90.0 and worker.engine.max_device_memory == 512 << 20
    defaults = load_settings({}, {})
    assert defaults.idle_unload is None and defaults.max_device_memory is None
    with pytest.raises(SettingsError, match=r"^--max-device-memory / SPEECHD_MAX_DEVICE_MEMORY: "):
        load_settings({}, {"SPEECHD_MAX_DEVICE_MEMORY": "plenty"})
    with pytest.raises(SettingsError, match="is not a duration"):
        load_settings({"idle_unload": "soon"}, {})
