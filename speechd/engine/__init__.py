"""Kokoro-82M for speechd: weights, voices, text normalisation, G2P, chunk planning and
synthesis.

Importing this package is cheap and torch-free (the api process uses `VoiceBook`,
`installed_voices`, `normalize_text` and `EngineConfig`); torch and kokoro load inside
`load_engine`, in the worker.
"""

from __future__ import annotations

import contextlib

from ._config import (
    DEFAULT_VOICE_MAP,
    LANGUAGES,
    MAX_SPEED,
    MIN_SPEED,
    SAMPLE_RATE,
    EngineConfig,
)
from ._normalize import normalize_text
from ._voices import VoiceBook, installed_voices

__all__ = [
    "DEFAULT_VOICE_MAP",
    "LANGUAGES",
    "MAX_SPEED",
    "MIN_SPEED",
    "SAMPLE_RATE",
    "EngineConfig",
    "VoiceBook",
    "installed_voices",
    "normalize_text",
]

for _name in __all__:
    _obj = globals()[_name]
    if hasattr(_obj, "__module__") and _obj.__module__.startswith(__name__ + "."):
        with contextlib.suppress(AttributeError, TypeError):  # builtins refuse it
            _obj.__module__ = __name__
del _name, _obj, contextlib
