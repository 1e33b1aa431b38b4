"""Stand-ins for `speechd.audio`, `speechd.engine` and `speechd.worker` while those packages
are still being built on other branches: only their import surface the api uses, installed
into `sys.modules` by `install()` and only for a package that does not exist yet. Tests only.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import types
from collections.abc import Mapping, Sequence
from pathlib import Path

import msgspec

__all__ = ["INSTALLED", "install", "missing"]

_PACKAGES = ("speechd.audio", "speechd.engine", "speechd.worker")

INSTALLED: list[str] = []
"""The stand-ins `install()` put in place in this process."""


def missing() -> list[str]:
    """The packages of `_PACKAGES` this checkout does not have yet."""
    return [
        name
        for name in _PACKAGES
        if name not in sys.modules and importlib.util.find_spec(name) is None
    ]


# -- speechd.audio ----------------------------------------------------------------------

FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
SAMPLE_RATE = 24000
_CONTENT_TYPES = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}


def content_type(fmt: str) -> str:
    return _CONTENT_TYPES[fmt]


# -- speechd.engine ---------------------------------------------------------------------

OPENAI_VOICES = (
    "alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer",
    "verse", "marin", "cedar",
)  # fmt: skip


class EngineConfig(msgspec.Struct, frozen=True):
    model_dir: Path | None = None
    device: str = "auto"
    threads: int | None = None
    default_voice: str = "af_heart"
    voice_map: dict[str, str] = {}


class VoiceBook:
    def __init__(
        self,
        installed: Sequence[str],
        *,
        voice_map: Mapping[str, str] | None = None,
        default_voice: str = "af_heart",
    ) -> None:
        self.installed = tuple(sorted(installed))
        self._map = dict(voice_map or {})
        self._default = default_voice

    def _one(self, name: str) -> str:
        name = self._map.get(name, name)
        if name in OPENAI_VOICES:
            name = self._default
        if name not in self.installed:
            from speechd.errors import UnknownVoice

            raise UnknownVoice(name, list(self.installed))
        return name

    def resolve(self, name: str) -> str:
        parts = []
        for part in name.split("+"):
            match = re.fullmatch(r"\s*([^()\s]+)\s*(?:\(\s*(\d+(?:\.\d+)?)\s*\))?\s*", part)
            if match is None:
                from speechd.errors import UnknownVoice

                raise UnknownVoice(name, list(self.installed))
            parts.append((self._one(match.group(1)), float(match.group(2) or 1)))
        if len(parts) == 1:
            return parts[0][0]
        return "+".join(f"{voice}({weight:g})" for voice, weight in parts)


def installed_voices(model_dir: Path) -> list[str]:
    return sorted(p.stem for p in (model_dir / "voices").glob("*.pt"))


# -- speechd.worker ---------------------------------------------------------------------

STALE_AFTER_MS = 15_000


class WorkerConfig(msgspec.Struct, frozen=True):
    store: str
    engine: EngineConfig
    worker_id: str | None = None
    max_active: int | None = None
    retries: int = 2
    comfortable_lead_s: float = 8.0
    heartbeat_s: float = 5.0


async def ready_workers(store, *, now_ms: int):  # type: ignore[no-untyped-def]
    """Like the real one: fresh by the store's timestamp of the last notice, and the stream's
    first notice (its `ready`) is what it returns."""
    from speechd.casts import WORKERS_PREFIX, WorkerNotice, decode

    found = []
    for info in await store.list(WORKERS_PREFIX):
        if info.next_seq == 0:
            continue
        last = (await store.read(info.name, info.next_seq - 1, max_records=1)).records[0]
        notice = decode(last.body, WorkerNotice)
        if notice.kind in ("ready", "heartbeat") and now_ms - last.timestamp < STALE_AFTER_MS:
            first = (await store.read(info.name, 0, max_records=1)).records[0]
            found.append(decode(first.body, WorkerNotice))
    return found


def run_worker(config: WorkerConfig, *, stop: object = None) -> int:
    raise RuntimeError("speechd.worker has not landed on this branch yet")


class Supervisor:
    def __init__(self, config: WorkerConfig) -> None:
        raise RuntimeError("speechd.worker has not landed on this branch yet")


def _module(name: str, **members: object) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(members)
    module.__all__ = list(members)  # type: ignore[attr-defined]
    return module


def install() -> list[str]:
    """Put a stand-in into `sys.modules` for each package this checkout lacks; their names."""
    import speechd

    shims = {
        "speechd.audio": lambda: _module(
            "speechd.audio", FORMATS=FORMATS, SAMPLE_RATE=SAMPLE_RATE, content_type=content_type
        ),
        "speechd.engine": lambda: _module(
            "speechd.engine",
            EngineConfig=EngineConfig,
            VoiceBook=VoiceBook,
            installed_voices=installed_voices,
        ),
        "speechd.worker": lambda: _module(
            "speechd.worker",
            WorkerConfig=WorkerConfig,
            ready_workers=ready_workers,
            run_worker=run_worker,
            Supervisor=Supervisor,
        ),
    }
    installed = []
    for name in missing():
        module = shims[name]()
        sys.modules[name] = module
        setattr(speechd, name.rsplit(".", 1)[1], module)
        installed.append(name)
    INSTALLED.extend(installed)
    return installed
