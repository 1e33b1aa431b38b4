"""Voice packs as numpy arrays, read without torch, and blended: `VoicePacks`.

A Kokoro voice pack (`voices/<name>.pt`) is one float32 tensor shaped (510, 1, 256): a style
vector for each phoneme count. `torch.save` writes it as a zip holding a small pickle and the
raw storage bytes; `read_pack` reads that layout with an unpickler that knows only the few
names a saved tensor uses (anything else is refused, like `torch.load(weights_only=True)`), so
an ONNX Runtime worker gets its voices without importing torch (~1 GB of RSS) and a pack
added to the folder later needs no conversion step. Packs in torch's older (non-zip) format
are read with torch when it is already loaded (the torch runtime), and refused otherwise with
a message that says how to re-save them.
"""

from __future__ import annotations

import pickle
import sys
import zipfile
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from speechd.errors import ModelUnavailable

from ._voices import VoiceBook

__all__ = ["VoicePacks", "read_pack"]

#: Blends are cached by spec, up to this many (single voices are always kept).
BLEND_CACHE: Final = 32
_DTYPES: Final = {
    "FloatStorage": np.float32,
    "HalfStorage": np.float16,
    "DoubleStorage": np.float64,
}


class _Storage:
    def __init__(self, dtype: type[np.generic]) -> None:
        self.dtype = np.dtype(dtype)


def _rebuild_tensor(
    storage: npt.NDArray[Any],
    offset: int,
    size: tuple[int, ...],
    stride: tuple[int, ...],
    *_: object,
) -> npt.NDArray[Any]:
    item = storage.itemsize
    end = offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True)) + 1
    if any(n <= 0 for n in size) or end > storage.size or min(stride, default=1) < 0:
        raise pickle.UnpicklingError("tensor outside its storage")
    view = np.lib.stride_tricks.as_strided(
        storage[offset:], shape=size, strides=[s * item for s in stride], writeable=False
    )
    return np.array(view, copy=True)


class _PackUnpickler(pickle.Unpickler):
    """Only what `torch.save(tensor)` writes: a rebuild call over one typed storage."""

    def __init__(self, file: Any, load: Callable[[str, np.dtype[Any], int], Any]) -> None:
        super().__init__(file)
        self._load = load

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor
        if module == "torch" and name in _DTYPES:
            return _Storage(_DTYPES[name])
        if (module, name) == ("collections", "OrderedDict"):
            return OrderedDict
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a saved tensor")

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise pickle.UnpicklingError("unknown persistent id")
        _, kind, key, _location, numel = pid
        if not isinstance(kind, _Storage):
            raise pickle.UnpicklingError("untyped storage")
        return self._load(str(key), kind.dtype, int(numel))


def read_pack(path: Path) -> npt.NDArray[np.float32]:
    """The tensor in a `torch.save` zip file, as float32; ValueError when it is not one."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            pickles = [n for n in names if n.endswith("/data.pkl") or n == "data.pkl"]
            if len(pickles) != 1:
                raise ValueError("not a single saved tensor")
            prefix = pickles[0][: -len("data.pkl")]
            order = "little"
            if prefix + "byteorder" in names:
                order = archive.read(prefix + "byteorder").decode().strip()

            def load(key: str, dtype: np.dtype[Any], numel: int) -> npt.NDArray[Any]:
                raw = archive.read(f"{prefix}data/{key}")
                endian = "<" if order == "little" else ">"
                array = np.frombuffer(raw, dtype=dtype.newbyteorder(endian))
                if array.size < numel:
                    raise ValueError("storage shorter than its tensor")
                return array

            with archive.open(pickles[0]) as file:
                tensor = _PackUnpickler(file, load).load()
    except (zipfile.BadZipFile, pickle.UnpicklingError, KeyError, EOFError) as exc:
        raise ValueError(str(exc) or type(exc).__name__) from exc
    if not isinstance(tensor, np.ndarray):
        raise ValueError("not a tensor")
    return np.ascontiguousarray(tensor, dtype=np.float32)


def _read_with_torch(path: Path) -> npt.NDArray[np.float32]:
    torch = sys.modules["torch"]
    pack = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(pack, torch.Tensor):
        raise ValueError("not a tensor")
    return np.ascontiguousarray(pack.to(torch.float32).numpy())


class VoicePacks:
    """The style vectors of one model folder's voices, blends included, kept in memory.

    `style(spec, phonemes)` is the (1, 256) vector Kokoro reads a chunk of `phonemes`
    phoneme characters with: row `phonemes - 1` of the pack (as KPipeline picks it), the
    blend of a spec being the weighted sum of its voices' packs.
    """

    def __init__(self, voices: VoiceBook, path_of: Callable[[str], Path]) -> None:
        self._voices = voices
        self._path_of = path_of
        self._packs: dict[str, npt.NDArray[np.float32]] = {}
        self._blends: OrderedDict[str, npt.NDArray[np.float32]] = OrderedDict()

    def style(self, voice: str, phonemes: int) -> npt.NDArray[np.float32]:
        pack = self.pack(voice)
        row = min(max(phonemes, 1), len(pack)) - 1
        return np.ascontiguousarray(pack[row].reshape(1, -1))

    def pack(self, voice: str) -> npt.NDArray[np.float32]:
        """The whole pack of a voice or blend (UnknownVoice, ModelUnavailable)."""
        spec = self._voices.resolve(voice)
        if "+" not in spec:
            return self._single(spec)
        blend = self._blends.get(spec)
        if blend is not None:
            self._blends.move_to_end(spec)
            return blend
        parts = self._voices.weights(spec)
        packs = [self._single(name) for name, _ in parts]
        blend = np.zeros_like(packs[0])
        for pack, (_, weight) in zip(packs, parts, strict=True):
            if pack.shape != blend.shape:
                raise ModelUnavailable(f"The voice packs of {spec!r} differ in shape.")
            blend += pack * np.float32(weight)
        self._blends[spec] = blend
        while len(self._blends) > BLEND_CACHE:
            self._blends.popitem(last=False)
        return blend

    def _single(self, name: str) -> npt.NDArray[np.float32]:
        pack = self._packs.get(name)
        if pack is not None:
            return pack
        path = self._path_of(name)
        try:
            try:
                pack = read_pack(path)
            except ValueError:
                if "torch" not in sys.modules:  # an old-format pack: never load torch for it
                    raise
                pack = _read_with_torch(path)
        except (OSError, ValueError, RuntimeError) as exc:
            raise ModelUnavailable(
                f"Cannot read voice pack {str(path)!r}: {exc} (re-save it with "
                "torch.save(tensor) in torch's default format)"
            ) from exc
        if pack.ndim < 2:
            raise ModelUnavailable(f"Voice pack {str(path)!r} is not a (510, 1, 256) tensor.")
        pack = pack.reshape(pack.shape[0], -1)
        self._packs[name] = pack
        return pack
