"""Kokoro-82M for speechd: weights, voices, text normalisation, G2P, chunk planning and
synthesis, on torch or on ONNX Runtime.

Importing this package is cheap and torch-free (the api process uses `VoiceBook`,
`EngineConfig` and `check_input`); the runtime loads inside
`load_engine`, in the worker (torch and kokoro for the torch engine; onnxruntime alone for
the ONNX one, which exports the weights once in a child process).

    engine = load_engine(EngineConfig(model_dir="~/models/kokoro-82m", engine="auto"))
    spec = engine.voices.resolve("af_bella(2)+af_sky(1)")   # "af_bella(0.667)+af_sky(0.333)"
    for chunk in engine.plan(text, spec, ChunkPolicy().with_rtf(measured_rtf)):
        audio = engine.synthesize(chunk, spec, 1.0, seed=seed_for(cast_id, chunk.index))
        for word in audio.words:            # where each word (or phrase) sounds in audio.pcm
            print(word.text, word.start / audio.sample_rate, word.end / audio.sample_rate)

    # several chunks (any casts, voices, speeds) in one forward pass, where that saves time:
    costs = measure_batch_costs(engine)                  # seconds per item by batch size
    size = choose_max_batch(costs)                       # 1 on a CPU, more on a GPU
    results = engine.synthesize_batch([BatchItem(chunk, spec, 1.0, seed), ...])
    # one Synthesis or SpeechdError per item, each as that item alone would give it
"""

from __future__ import annotations

import contextlib

from ._batch import BatchItem, choose_max_batch, measure_batch_costs
from ._check import InputCheck, check_input
from ._config import (
    DEFAULT_VOICE_MAP,
    LANGUAGES,
    MAX_SPEED,
    MIN_SPEED,
    SAMPLE_RATE,
    EngineConfig,
)
from ._device import DEVICE_HELP, device_name, parse_device
from ._engine import Engine, Synthesis
from ._lexicon import LexiconError, LexiconFile
from ._loading import load_engine
from ._memory import parse_size
from ._plan import Chunk, ChunkPolicy
from ._planner import FLUSH_S, Planner, PlanStatus
from ._runtime import SAMPLES_PER_FRAME
from ._speakable import missing_languages, voice_language
from ._ssml import looks_like_ssml
from ._voices import VoiceBook

__all__ = [
    "DEFAULT_VOICE_MAP",
    "DEVICE_HELP",
    "FLUSH_S",
    "LANGUAGES",
    "MAX_SPEED",
    "MIN_SPEED",
    "SAMPLES_PER_FRAME",
    "SAMPLE_RATE",
    "BatchItem",
    "Chunk",
    "ChunkPolicy",
    "Engine",
    "EngineConfig",
    "InputCheck",
    "LexiconError",
    "LexiconFile",
    "PlanStatus",
    "Planner",
    "Synthesis",
    "VoiceBook",
    "check_input",
    "choose_max_batch",
    "device_name",
    "load_engine",
    "looks_like_ssml",
    "measure_batch_costs",
    "missing_languages",
    "parse_device",
    "parse_size",
    "voice_language",
]

for _name in __all__:
    _obj = globals()[_name]
    if hasattr(_obj, "__module__") and _obj.__module__.startswith(__name__ + "."):
        with contextlib.suppress(AttributeError, TypeError):  # builtins refuse it
            _obj.__module__ = __name__
del _name, _obj, contextlib
