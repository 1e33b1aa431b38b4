"""The Encoder protocol and what every encoder shares: input checks, sample conversion, state."""

from __future__ import annotations

import enum
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from ._formats import SAMPLE_RATES

__all__ = ["Encoder", "EncoderFinished", "check_sample_rate", "to_float32", "to_s16"]


@runtime_checkable
class Encoder(Protocol):
    """Turns one cast's PCM, chunk by chunk, into the bytes of one file in `format`.

    `encode` returns the bytes that chunk completes (the first call also carries the file header;
    a call may return b"" while a codec frame is still filling). `final=True` flushes everything
    and ends the file; the encoder cannot be used after that. The concatenation of every returned
    value, in order, is one valid, gapless file.
    """

    format: str

    def encode(self, pcm: npt.ArrayLike, *, final: bool = False) -> bytes: ...


class EncoderFinished(RuntimeError):
    """`encode` was called after `encode(..., final=True)` ended the file."""


class _State(enum.Enum):
    OPEN = "open"
    FINISHED = "finished"


def check_sample_rate(sample_rate: int) -> int:
    if sample_rate not in SAMPLE_RATES:
        raise ValueError(f"sample_rate must be one of {SAMPLE_RATES}, not {sample_rate!r}")
    return sample_rate


def to_float32(pcm: npt.ArrayLike) -> np.ndarray:
    """Mono float32 samples in [-1, 1]: NaN becomes 0, everything else is clipped."""
    a = np.asarray(pcm)
    if a.ndim == 2 and 1 in a.shape:
        a = a.reshape(-1)
    if a.ndim != 1:
        raise ValueError(f"pcm must be mono (one dimension), got shape {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.floating):
        raise TypeError(f"pcm must hold floats in [-1, 1], got dtype {a.dtype}")
    a = np.nan_to_num(a.astype(np.float32, copy=False), nan=0.0, posinf=1.0, neginf=-1.0)
    return np.clip(a, -1.0, 1.0)


def to_s16(samples: np.ndarray) -> np.ndarray:
    """float32 in [-1, 1] (from to_float32) to int16, rounding to the nearest step of 1/32767."""
    return np.rint(samples * np.float32(32767.0)).astype("<i2")


class EncoderBase:
    """Keeps the open/finished state so subclasses only implement `_encode`."""

    format: str
    sample_rate: int

    def __init__(self, sample_rate: int) -> None:
        self.sample_rate = check_sample_rate(sample_rate)
        self._state = _State.OPEN

    def encode(self, pcm: npt.ArrayLike, *, final: bool = False) -> bytes:
        if self._state is _State.FINISHED:
            raise EncoderFinished(f"this {self.format} encoder already ended its file")
        samples = to_float32(pcm)
        if final:
            self._state = _State.FINISHED
        return self._encode(samples, final)

    def _encode(self, samples: np.ndarray, final: bool) -> bytes:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.format} {self.sample_rate} Hz {self._state.value}>"
