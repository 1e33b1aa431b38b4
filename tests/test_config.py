"""Settings: flags over `SPEECHD_*` env over defaults, checked by msgspec."""

from __future__ import annotations

import pytest

from speechd.cli import build_parser
from speechd.config import Settings, SettingsError, load_settings, parse_duration


def test_defaults_follow_xdg_and_store_defaults_to_the_data_dir() -> None:
    settings = load_settings({}, {"XDG_DATA_HOME": "/x/share"})
    assert settings.data_dir == "/x/share/speechd"
    assert settings.store_url == "/x/share/speechd"
    assert (settings.host, settings.port, settings.api_keys) == ("127.0.0.1", 8000, ())
    assert settings.retention is None


def test_flags_win_over_env_and_env_over_defaults() -> None:
    env = {
        "SPEECHD_PORT": "9000",
        "SPEECHD_HOST": "0.0.0.0",
        "SPEECHD_API_KEY": "k1, k2",
        "SPEECHD_RETENTION": "30d",
        "SPEECHD_STORE": "nats://127.0.0.1:4222",
        "SPEECHD_DEVICE": "cpu",
        "SPEECHD_VOICE_MAP": "alloy=af_bella,echo=am_adam",
    }
    settings = load_settings({"port": 8123, "host": None}, env)
    assert settings.port == 8123
    assert settings.host == "0.0.0.0"
    assert settings.api_keys == ("k1", "k2")
    assert settings.retention == 30 * 86400
    assert settings.store_url == "nats://127.0.0.1:4222"
    assert settings.device == "cpu"
    assert settings.voice_map == {"alloy": "af_bella", "echo": "am_adam"}


@pytest.mark.parametrize(
    ("value", "seconds"), [("90", 90), ("90s", 90), ("15m", 900), ("12h", 43200), ("1.5d", 129600)]
)
def test_durations(value: str, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize(
    ("flags", "env", "names"),
    [
        ({"port": 70000}, {}, "--port / SPEECHD_PORT"),
        ({}, {"SPEECHD_PORT": "eighty"}, "--port / SPEECHD_PORT"),
        ({}, {"SPEECHD_DEVICE": "tpu"}, "--device / SPEECHD_DEVICE"),
        ({"max_queue": 0}, {}, "--max-queue / SPEECHD_MAX_QUEUE"),
        ({"retention": "soon"}, {}, "soon"),
    ],
)
def test_bad_values_name_the_flag_and_the_variable(
    flags: dict[str, object], env: dict[str, str], names: str
) -> None:
    with pytest.raises(SettingsError, match=names):
        load_settings(flags, env)


def test_the_parser_collects_repeated_api_keys_and_each_command_its_own_flags() -> None:
    parser = build_parser()
    args = parser.parse_args(["serve", "--api-key", "a", "--api-key", "b", "--threads", "2"])
    assert args.api_keys == ["a", "b"] and args.threads == 2
    assert parser.parse_args(["api", "--max-queue", "5"]).max_queue == 5
    with pytest.raises(SystemExit):
        parser.parse_args(["worker", "--port", "1"])  # the worker serves no HTTP


def test_the_worker_policy_reaches_the_worker_config_from_flag_or_env() -> None:
    parser = build_parser()
    assert parser.parse_args(["worker", "--policy", "fifo"]).policy == "fifo"
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--policy", "random"])
    assert load_settings({}, {}).worker_config().policy == "deadline"
    assert load_settings({}, {"SPEECHD_POLICY": "fifo"}).worker_config().policy == "fifo"
    with pytest.raises(SettingsError, match="--policy / SPEECHD_POLICY"):
        load_settings({}, {"SPEECHD_POLICY": "lifo"})


def test_settings_reject_unknown_fields() -> None:
    import msgspec

    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"prot": 1}, Settings)


def test_the_engine_choice_reaches_the_worker_config_from_flag_or_env() -> None:
    parser = build_parser()
    args = parser.parse_args(["worker", "--engine", "onnx", "--onnx-model", "/m/k.onnx"])
    assert (args.engine, args.onnx_model) == ("onnx", "/m/k.onnx")
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--engine", "tensorflow"])
    with pytest.raises(SystemExit):
        parser.parse_args(["api", "--engine", "onnx"])  # the api loads no model
    assert load_settings({}, {}).worker_config().engine.engine == "auto"
    env = {"SPEECHD_ENGINE": "onnx", "SPEECHD_CACHE_DIR": "/c"}
    engine = load_settings({"engine": "torch"}, env).worker_config().engine
    assert (engine.engine, engine.cache_dir, engine.onnx_model) == ("torch", "/c", None)
    with pytest.raises(SettingsError, match="--engine / SPEECHD_ENGINE"):
        load_settings({}, {"SPEECHD_ENGINE": "tpu"})


def test_max_active_reaches_the_worker_config_from_flag_or_env() -> None:
    parser = build_parser()
    assert parser.parse_args(["serve", "--max-active", "2"]).max_active == 2
    with pytest.raises(SystemExit):
        parser.parse_args(["api", "--max-active", "2"])  # the api admits nothing
    assert load_settings({}, {}).worker_config().max_active is None  # capacity alone
    assert load_settings({}, {"SPEECHD_MAX_ACTIVE": "3"}).worker_config().max_active == 3
    flag_over_env = load_settings({"max_active": 1}, {"SPEECHD_MAX_ACTIVE": "3"})
    assert flag_over_env.worker_config().max_active == 1
    with pytest.raises(SettingsError, match="--max-active / SPEECHD_MAX_ACTIVE"):
        load_settings({}, {"SPEECHD_MAX_ACTIVE": "0"})


def test_max_batch_reaches_the_worker_config_from_flag_or_env() -> None:
    parser = build_parser()
    assert parser.parse_args(["worker", "--max-batch", "4"]).max_batch == "4"
    with pytest.raises(SystemExit):
        parser.parse_args(["api", "--max-batch", "4"])  # the api renders nothing
    assert load_settings({}, {}).worker_config().max_batch is None  # auto
    assert load_settings({}, {"SPEECHD_MAX_BATCH": "8"}).worker_config().max_batch == 8
    assert (
        load_settings({"max_batch": "auto"}, {"SPEECHD_MAX_BATCH": "8"}).worker_config().max_batch
        is None
    )
    assert load_settings({"max_batch": "1"}, {}).worker_config().max_batch == 1
    for bad in ("0", "many", "-2"):
        with pytest.raises(SettingsError, match="--max-batch / SPEECHD_MAX_BATCH"):
            load_settings({}, {"SPEECHD_MAX_BATCH": bad})


def test_comfortable_lead_reaches_the_worker_config_from_flag_or_env() -> None:
    parser = build_parser()
    assert parser.parse_args(["serve", "--comfortable-lead", "600"]).comfortable_lead == "600"
    assert parser.parse_args(["worker", "--comfortable-lead", "5"]).comfortable_lead == "5"
    assert load_settings({}, {}).worker_config().comfortable_lead_s == 30.0  # the worker's own
    env = {"SPEECHD_COMFORTABLE_LEAD": "600"}
    assert load_settings({}, env).worker_config().comfortable_lead_s == 600.0
    assert load_settings({"comfortable_lead": "90"}, env).worker_config().comfortable_lead_s == 90
    with pytest.raises(SettingsError, match="--comfortable-lead / SPEECHD_COMFORTABLE_LEAD"):
        load_settings({}, {"SPEECHD_COMFORTABLE_LEAD": "-1"})
