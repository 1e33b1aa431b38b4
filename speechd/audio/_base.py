"""The Encoder protocol and what every encoder shares: input checks, sample conversion, state."""

from __future__ import annotations

import enum
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from ._formats import SAMPLE_RATES

__all__ = [
    "TAIL_SAMPLES",
    "Encoder",
    "EncoderBase",
    "EncoderFinished",
    "check_sample_rate",
    "to_float32",
    "to_s16",
]

TAIL_SAMPLES = 16_384
"""The input every encoder keeps (its last samples, as s16) for its checkpoint: more than any
codec holds back plus the pre-roll a resumed codec is fed (about 240 ms at most, for opus)."""


@runtime_checkable
class Encoder(Protocol):
    """Turns one cast's PCM, chunk by chunk, into the bytes of one file in `format`.

    `encode` returns the bytes that chunk completes (the first call also carries the file header;
    a call may return b"" while a codec frame is still filling). `final=True` flushes everything
    and ends the file; the encoder cannot be used after that. The concatenation of every returned
    value, in order, is one valid, gapless file.

    `checkpoint()` says how to continue the file after the bytes returned so far (see
    `speechd.audio._resume`); `new_encoder(fmt, resume=checkpoint)` builds an encoder whose
    output, appended to those bytes, still makes one valid file. `fingerprint` names what a
    checkpoint needs to match to be continued (format, settings, checkpoint version).
    """

    format: str
    fingerprint: str

    def encode(self, pcm: npt.ArrayLike, *, final: bool = False) -> bytes: ...

    def checkpoint(self) -> bytes: ...


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
    """Keeps the open/finished state, and the input so far (`fed`, the last `TAIL_SAMPLES` as
    s16, for checkpoints), so subclasses only implement `_encode` and `checkpoint`."""

    format: str
    fingerprint: str
    sample_rate: int

    def __init__(self, sample_rate: int, *, fed: int = 0, tail: bytes = b"") -> None:
        self.sample_rate = check_sample_rate(sample_rate)
        self._state = _State.OPEN
        self.fed = fed  # input samples so far, on the cast's timeline (a resumed one's too)
        self._tail = np.frombuffer(tail, dtype="<i2")[-TAIL_SAMPLES:].copy()
        self._tail_from = fed - self._tail.size  # timeline index of _tail[0]

    def encode(self, pcm: npt.ArrayLike, *, final: bool = False) -> bytes:
        if self._state is _State.FINISHED:
            raise EncoderFinished(f"this {self.format} encoder already ended its file")
        samples = to_float32(pcm)
        if final:
            self._state = _State.FINISHED
        s16 = to_s16(samples)
        tail = np.concatenate([self._tail, s16])[-TAIL_SAMPLES:]
        self.fed += samples.size
        self._tail, self._tail_from = tail, self.fed - tail.size
        return self._encode(samples, final)

    def recent(self, start: int) -> bytes:
        """The input from timeline sample `start` on, as s16le; zeros before sample 0 (what a
        codec's priming stands for)."""
        if start < 0:
            return bytes(-2 * start) + self.recent(0)
        if start < self._tail_from:
            raise ValueError(f"sample {start} is no longer kept (kept from {self._tail_from})")
        return self._tail[start - self._tail_from :].tobytes()

    def _encode(self, samples: np.ndarray, final: bool) -> bytes:
        raise NotImplementedError

    def checkpoint(self) -> bytes:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.format} {self.sample_rate} Hz {self._state.value}>"
