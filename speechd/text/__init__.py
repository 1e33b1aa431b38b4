"""The text front end: what a caller sent (plain text, SSML, inline pronunciations, with the
deployment's lexicon) read into units, each with its phonemes, the span of the input it came
from and the pauses and rates its markup asks for, and cut into the chunks the engine
synthesizes. No model here: the engine (`speechd.engine`) turns chunks into audio
(docs/design/index.md#the-text-floor).

Importing this package loads no torch, no ONNX Runtime and none of Kokoro's model code, and
neither does building a G2P inside `without_torch` (misaki's English G2P needs spaCy, whose
ML library imports torch when it is installed).

    check_input(text, lang="a", ssml=looks_like_ssml(text))   # the api's check: no G2P
    with without_torch():
        g2p = build_g2p("a")                                 # misaki; built once per language
    planner = Planner(g2p, ChunkPolicy(), text=text, done=True, ssml=looks_like_ssml(text))
    for chunk in planner.chunks():  # or planner.step(), one bounded step at a time
        print(chunk.phonemes, [(span.text, span.source) for span in chunk.words])

The way there, module by module: `_xml` and `_ssml` read SSML (`_sayas` its `say-as`,
`_phonemes` its phones) and `_document` lays it out as text and events; `_english`,
`_inline`, `_normalize` and `_slices` make plain text speakable in bounded slices (`_mapped`
keeps every rewritten character's place in the input); `_lexicon` applies the deployment's
pronunciations; `_g2p` turns segments into units (`_languages`: which languages this machine
can speak); `_segments` and `_planner` drive it all a step at a time; `_chunks` cuts units
into chunks (`ChunkPolicy`: how they grow), `_spans` places each unit in its chunk; `_check`
is what the api checks of a request's text before it makes a cast. `XmlReader` (with its
`SsmlError`) is the bounded XML tokenizer under the SSML reader, which `speechd.books` reads a
book's XML with too.
"""

from __future__ import annotations

import contextlib

from ._check import InputCheck, check_input
from ._chunks import MAX_SPEED, MIN_SPEED, MODEL_MAX_TOKENS, Chunk, ChunkPolicy
from ._g2p import G2P, build_g2p, without_torch
from ._languages import LANGUAGES, missing_languages, voice_language
from ._lexicon import LexiconError, LexiconFile
from ._planner import FLUSH_S, Planner, PlanStatus
from ._spans import NO_SOURCE, Span, UnitKind, unit_kind
from ._ssml import MAX_PAUSE_S, allowed_pause_s, looks_like_ssml
from ._xml import SsmlError, XmlReader

__all__ = [
    "FLUSH_S",
    "G2P",
    "LANGUAGES",
    "MAX_PAUSE_S",
    "MAX_SPEED",
    "MIN_SPEED",
    "MODEL_MAX_TOKENS",
    "NO_SOURCE",
    "Chunk",
    "ChunkPolicy",
    "InputCheck",
    "LexiconError",
    "LexiconFile",
    "PlanStatus",
    "Planner",
    "Span",
    "SsmlError",
    "UnitKind",
    "XmlReader",
    "allowed_pause_s",
    "build_g2p",
    "check_input",
    "looks_like_ssml",
    "missing_languages",
    "unit_kind",
    "voice_language",
    "without_torch",
]

for _name in __all__:
    _obj = globals()[_name]
    if hasattr(_obj, "__module__") and _obj.__module__.startswith(__name__ + "."):
        with contextlib.suppress(AttributeError, TypeError):  # builtins refuse it
            _obj.__module__ = __name__
del _name, _obj, contextlib
