"""The engine's settings: where the weights live, which device, and how voice names map.

Everything here is torch-free: the api process reads the same config to validate voices.
"""

from types import MappingProxyType
from typing import Annotated, Final, Literal

import msgspec

from ._device import Device

__all__ = ["DEFAULT_VOICE_MAP", "SAMPLE_RATE", "EngineConfig"]

#: Kokoro-82M's output rate, fixed by its iSTFT decoder.
SAMPLE_RATE: Final = 24_000

#: OpenAI's voice names -> Kokoro voices. OpenAI's names with a Kokoro namesake map to it
#: (alloy, echo, fable, onyx, nova); the others go to a Kokoro voice of the same register
#: (female: coral, marin, sage, shimmer; male: ash, ballad, cedar, verse). A mapped voice that
#: the model folder lacks falls back to `EngineConfig.default_voice`. A value may be a blend.
DEFAULT_VOICE_MAP: Final = MappingProxyType(
    {
        "alloy": "af_alloy",
        "ash": "am_adam",
        "ballad": "bm_george",
        "cedar": "am_michael",
        "coral": "af_heart",
        "echo": "am_echo",
        "fable": "bm_fable",
        "marin": "af_bella",
        "nova": "af_nova",
        "onyx": "am_onyx",
        "sage": "af_sarah",
        "shimmer": "af_sky",
        "verse": "am_puck",
    }
)


def _default_voice_map() -> dict[str, str]:
    return dict(DEFAULT_VOICE_MAP)


class EngineConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How the worker loads Kokoro-82M.

    `model_dir` is a local folder laid out like the hexgrad/Kokoro-82M repository
    (`config.json`, `kokoro-v1_0.pth`, `voices/*.pt`); None downloads that repository through
    Hugging Face (and fails within seconds when offline). `device` is `auto` (the current
    CUDA device if there is one, else the CPU), `cpu`, `cuda` or `cuda:N`. `threads` sets
    the runtime's intra-op thread count (None keeps its default).

    `engine` picks the runtime: "torch", "onnx" (ONNX Runtime, over an export of the same
    weights made once and cached, or over `onnx_model`: an existing Kokoro ONNX export, a
    `.onnx` file or a speechd export folder), or "auto": ONNX Runtime when it is installed
    (with a CUDA provider, for a GPU) and the model can be exported or found, torch
    otherwise. Exports are kept beside the weights, or under `cache_dir` (default
    `~/.cache/speechd`) when the model folder cannot be written.

    `graph` picks the decoder graph ONNX Runtime speaks with on a CPU: "float" (the
    export's, the default here), "fused" (float, rewritten), "int8" (its Snake convolutions
    in 8 bits), or "auto": the fastest of those on this machine within their quality bounds,
    measured once (`speechd.engine._graph_choice`; the variants are built first, once, a few
    minutes). The server's default is "auto" (`--graph`). ONNX Runtime on a GPU speaks with
    the float graph; torch with kokoro's modules as they are ("float") or with the same float
    rewrites written as modules ("fused", which "auto" takes; `speechd.engine._torch_fused`),
    and has no int8.

    `max_device_memory` caps the bytes the worker holds on its device (None: no cap): chunks
    are planned to fit (`MemoryBudget`), and torch's allocator (or ONNX Runtime's CUDA
    arena) is held to it on a CUDA device.
    """

    model_dir: str | None = None
    device: Device = "auto"
    threads: Annotated[int, msgspec.Meta(ge=1)] | None = None
    default_voice: str = "af_heart"
    voice_map: dict[str, str] = msgspec.field(default_factory=_default_voice_map)
    engine: Literal["auto", "torch", "onnx"] = "auto"
    onnx_model: str | None = None
    cache_dir: str | None = None
    lexicon: str | None = None
    """A lexicon file (`speechd.text.LexiconFile`), applied to every plan; reloaded when
    it changes."""
    max_device_memory: Annotated[int, msgspec.Meta(ge=1)] | None = None
    graph: Literal["auto", "float", "fused", "int8"] = "float"
