"""Kokoro-82M for speechd: weights, voices, devices, batches and synthesis, on torch or on
ONNX Runtime. The text it speaks is read and planned into chunks by the text front end
(`speechd.text`: SSML, normalisation, G2P, the lexicon, chunk planning), which the engine
drives with the G2P of each voice's language.

Importing this package is cheap and torch-free (the api process uses `VoiceBook` and
`EngineConfig`); the runtime loads inside
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

A chunk may be stopped while it is made (`Stop`, set from another thread: the worker gives the
device to a listener who arrives during a book's chunk); `synthesize` then raises Preempted.

A pause (SSML `break`) is a silent chunk of its own: `silence(chunk)` makes it without the
model (`synthesize` hands it there too), and the worker writes it so, never asking the engine.
"""

from __future__ import annotations

import contextlib

from ._batch import BatchItem, choose_max_batch, measure_batch_costs
from ._config import DEFAULT_VOICE_MAP, SAMPLE_RATE, EngineConfig
from ._device import DEVICE_HELP, device_name, parse_device
from ._engine import Engine, Synthesis, silence
from ._loading import load_engine
from ._memory import parse_size
from ._runtime import SAMPLES_PER_FRAME
from ._stop import Preempted, Stop
from ._voices import VoiceBook

__all__ = [
    "DEFAULT_VOICE_MAP",
    "DEVICE_HELP",
    "SAMPLES_PER_FRAME",
    "SAMPLE_RATE",
    "BatchItem",
    "Engine",
    "EngineConfig",
    "Preempted",
    "Stop",
    "Synthesis",
    "VoiceBook",
    "choose_max_batch",
    "device_name",
    "load_engine",
    "measure_batch_costs",
    "parse_device",
    "parse_size",
    "silence",
]

for _name in __all__:
    _obj = globals()[_name]
    if hasattr(_obj, "__module__") and _obj.__module__.startswith(__name__ + "."):
        with contextlib.suppress(AttributeError, TypeError):  # builtins refuse it
            _obj.__module__ = __name__
del _name, _obj, contextlib
