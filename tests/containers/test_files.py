"""What the shipping files promise, read without building anything (the fast tier): the three
Containerfiles share one layout, the Jetson one installs nothing from PyPI that the aarch64
wheel check does not cover, compose.yaml's profiles are the ones the manual names, and the Home
Assistant add-on's every option is a real `speechd serve` flag with a translation."""

from __future__ import annotations

import importlib.util
import re
import shlex
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from speechd.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
CONTAINERS = ROOT / "containers"
VARIANTS = ("cpu", "onnx", "cuda", "jetson")
#: The lines every image has, as its users rely on them.
LAYOUT = (
    "COPY containers/layout.sh /tmp/layout.sh",
    "USER speechd",
    "EXPOSE 8000 10200",
    'ENTRYPOINT ["/usr/bin/tini", "--", "speechd"]',
    'CMD ["serve"]',
)
SETTINGS = {
    "SPEECHD_HOST": "0.0.0.0",
    "SPEECHD_DATA_DIR": "/var/lib/speechd",
    "SPEECHD_CACHE_DIR": "/var/cache/speechd",
    "HF_HOME": "/var/cache/speechd/huggingface",
}


def _load(path: Path) -> ModuleType:
    name = f"shipped_{path.parent.name}_{path.stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # a dataclass finds its module there
        spec.loader.exec_module(module)
    return sys.modules[name]


def _containerfile(variant: str) -> str:
    # Continued lines joined, comments dropped: one instruction per line.
    text = (CONTAINERS / variant / "Containerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    return re.sub(r"\\\n\s*", " ", "\n".join(lines))


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_image_has_the_one_layout(variant: str) -> None:
    text = _containerfile(variant)
    for line in LAYOUT:
        assert line in text, f"{variant}: {line}"
    env = dict(re.findall(r"(\w+)=(\S+)", "\n".join(re.findall(r"^ENV .*$", text, re.M))))
    assert {k: env.get(k) for k in SETTINGS} == SETTINGS
    (check,) = re.findall(r"^HEALTHCHECK .*$", text, re.M)
    assert "/readyz" in check and "SPEECHD_PORT" in check
    # The weights are not in the image unless a build argument asks.
    assert "kokoro-v1_0.pth" not in text and "COPY --from=weights" not in text


def test_the_jetson_image_installs_only_what_the_aarch64_wheel_check_resolves() -> None:
    wheels = _load(ROOT / "scripts" / "check_aarch64_wheels.py")
    text = _containerfile("jetson")
    (line,) = re.findall(r"python3 \S*requirements\.py (\S+) ([^>\n]*)>", text)
    extras = set(shlex.split(line[1]))
    assert extras <= set(wheels.EXTRAS)
    assert "3.10" in {target.python for target in wheels.TARGETS}  # JetPack 6's Python
    # Beyond those: NVIDIA's onnxruntime-gpu (its own index, as docs/gpus.md says) and tomli.
    installs = re.findall(r"pip3 install ([^&]*)", text)
    named = {w for i in installs for w in shlex.split(i) if not w.startswith(("-", "/", "$"))}
    assert named <= {"tomli", "onnxruntime-gpu"}, named


def test_the_requirements_leave_torch_to_each_image() -> None:
    requirements = _load(CONTAINERS / "requirements.py")
    pyproject = str(ROOT / "pyproject.toml")
    names = [re.split(r"[<>=\[;]", r)[0] for r in requirements.requirements(pyproject, ["onnx"])]
    assert "torch" not in names and "kokoro" in names and "onnxruntime" in names
    lean = requirements.requirements(pyproject, ["onnx"], with_torch=False)
    names = [re.split(r"[<>=\[;]", r)[0] for r in lean]
    assert not {"torch", "kokoro", "spacy-curated-transformers"} & set(names)
    assert "misaki" in names and "spacy" in names and not any("[" in r for r in lean)


def _compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


def test_compose_has_one_box_a_scale_out_and_open_webui() -> None:
    services = _compose()["services"]
    profiles = {name: set(s.get("profiles", [])) for name, s in services.items()}
    assert profiles == {
        "speechd": {"box", "openwebui"},
        "nats": {"scale-out"},
        "api": {"scale-out"},
        "worker": {"scale-out"},
        "openwebui": {"openwebui"},
    }
    speechd = {"speechd", "api", "worker"}
    for name in speechd:  # one settings file; time to drain before a stop turns into a kill
        assert services[name]["env_file"] == "containers/speechd.env"
        assert int(services[name]["stop_grace_period"].rstrip("s")) > 30
    assert services["worker"]["deploy"]["replicas"] == 2
    assert services["worker"]["command"] == ["worker"] and services["api"]["command"] == ["api"]
    for name in ("api", "worker"):
        assert services[name]["environment"]["SPEECHD_STORE"] == "nats://nats:4222"
    nats = services["nats"]
    assert nats["image"].startswith("nats:") and "-js" in nats["command"]
    assert any(v.endswith(":/data") for v in nats["volumes"]) and "-sd" in nats["command"]
    webui = services["openwebui"]["environment"]
    assert webui["AUDIO_TTS_ENGINE"] == "openai"
    assert webui["AUDIO_TTS_OPENAI_API_BASE_URL"] == "http://speechd:8000/v1"


def test_the_settings_file_sets_only_real_settings() -> None:
    from speechd.config import load_settings

    lines = (CONTAINERS / "speechd.env").read_text().splitlines()
    values = dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))
    assert all(k.startswith("SPEECHD_") for k in values)
    load_settings({}, values)  # a SettingsError if one is not a setting speechd can use


def _addon() -> tuple[dict[str, Any], dict[str, Any], ModuleType]:
    config = yaml.safe_load((CONTAINERS / "homeassistant" / "config.yaml").read_text())
    words = yaml.safe_load((CONTAINERS / "homeassistant" / "translations" / "en.yaml").read_text())
    return config, words, _load(CONTAINERS / "homeassistant" / "run.py")


def test_every_add_on_option_is_a_serve_flag_with_words() -> None:
    config, words, run = _addon()
    assert config["discovery"] == ["wyoming"] and config["ports"]["10200/tcp"] == 10200
    assert set(config["options"]) <= set(config["schema"])
    assert set(config["schema"]) == set(run.FLAGS) == set(words["configuration"])
    serve = next(
        action.choices["serve"]
        for action in build_parser()._actions
        if getattr(action, "choices", None) and "serve" in action.choices
    )
    flags = {flag for action in serve._actions for flag in action.option_strings}
    assert set(run.FLAGS.values()) <= flags
    assert set(words["network"]) == set(config["ports"])


def test_the_add_on_run_script_passes_what_was_set() -> None:
    _, _, run = _addon()
    argv = run.command({"voice": "am_adam", "api_keys": ["a", "b"], "threads": None, "lexicon": ""})
    assert argv[:4] == ["speechd", "serve", "--wyoming-uri", "tcp://0.0.0.0:10200"]
    assert argv[4:] == ["--default-voice", "am_adam", "--api-key", "a", "--api-key", "b"]
    assert build_parser().parse_args(argv[1:]).api_keys == ["a", "b"]
