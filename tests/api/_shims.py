"""Stand-ins for `speechd.audio`, `speechd.engine` and `speechd.worker` while those packages
are still being built on other branches: only their import surface the api uses, installed
into `sys.modules` by `install()` and only for a package that does not exist yet. Tests only.
"""

from __future__ import annotations

import importlib.util
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

OPENAI_VOICES = {
    "alloy": "af_alloy", "ash": "am_adam", "ballad": "bm_george", "cedar": "am_michael",
    "coral": "af_heart", "echo": "am_echo", "fable": "bm_fable", "marin": "af_bella",
    "nova": "af_nova", "onyx": "am_onyx", "sage": "af_sarah", "shimmer": "af_sky",
    "verse": "am_puck",
}  # fmt: skip


MIN_SPEED = 0.25
MAX_SPEED = 4.0
LANGUAGES = {
    "a": "American English", "b": "British English", "e": "Spanish", "f": "French",
    "h": "Hindi", "i": "Italian", "j": "Japanese", "p": "Brazilian Portuguese",
    "z": "Mandarin Chinese",
}  # fmt: skip


class EngineConfig(msgspec.Struct, frozen=True):
    model_dir: str | None = None
    device: str = "auto"
    threads: int | None = None
    default_voice: str = "af_heart"
    voice_map: dict[str, str] = msgspec.field(default_factory=lambda: dict(OPENAI_VOICES))


class VoiceBook:
    """Names and aliases as the engine branch resolves them (blends left out): an alias whose
    target is not installed falls back to the default voice."""

    def __init__(
        self, installed: Sequence[str], *, voice_map: Mapping[str, str], default_voice: str
    ) -> None:
        self.installed = sorted(set(installed))
        self._map = dict(voice_map)
        self._default = default_voice

    def resolve(self, name: str) -> str:
        from speechd.errors import UnknownVoice

        if name in self.installed:
            return name
        if name in self._map:
            for candidate in (self._map[name], self._default):
                if candidate in self.installed:
                    return candidate
        raise UnknownVoice(name, [*self.installed, *sorted(self._map)])


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


async def committed_offset(store):  # type: ignore[no-untyped-def]
    from speechd.casts import JOBS_CURSOR, Cursor, decode

    tail = await store.check_tail(JOBS_CURSOR)
    if tail == 0:
        return 0
    batch = await store.read(JOBS_CURSOR, tail - 1, max_records=1)
    return decode(batch.records[0].body, Cursor).offset


async def queue_depth(store):  # type: ignore[no-untyped-def]
    from speechd.casts import JOBS

    return max(0, await store.check_tail(JOBS) - await committed_offset(store))


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
            LANGUAGES=LANGUAGES,
            MAX_SPEED=MAX_SPEED,
            MIN_SPEED=MIN_SPEED,
            EngineConfig=EngineConfig,
            VoiceBook=VoiceBook,
            installed_voices=installed_voices,
        ),
        "speechd.worker": lambda: _module(
            "speechd.worker",
            WorkerConfig=WorkerConfig,
            ready_workers=ready_workers,
            committed_offset=committed_offset,
            queue_depth=queue_depth,
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
