"""`new_encoder`: one encoder per cast, picked by response format; or one that continues a file
from a checkpoint (see `_resume`)."""

from __future__ import annotations

import numpy as np

from ._av import PROFILES, AvEncoder
from ._av import fingerprint as av_fingerprint
from ._base import Encoder
from ._formats import SAMPLE_RATE, check_format
from ._mp3 import FINGERPRINT as MP3_FINGERPRINT
from ._mp3 import Mp3Encoder
from ._raw import PcmEncoder, WavEncoder
from ._resume import VERSION, SplicedEncoder, load

__all__ = ["encoder_fingerprint", "new_encoder"]


def new_encoder(
    fmt: str, sample_rate: int = SAMPLE_RATE, *, resume: bytes | None = None
) -> Encoder:
    """A fresh encoder for one cast in `fmt` (InvalidRequest(param="response_format") if
    unknown; ValueError for a sample rate outside SAMPLE_RATES).

    With `resume` (an encoder's `checkpoint()`), one that continues that file: its output,
    after the bytes the checkpointed encoder had returned, makes one valid file. ValueError if
    `resume` is not a checkpoint of `fmt` at `sample_rate` that this version continues.
    """
    check_format(fmt)
    if resume is None:
        return _fresh(fmt, sample_rate)
    checkpoint = load(resume)
    if (checkpoint.format, checkpoint.sample_rate) != (fmt, sample_rate):
        raise ValueError(
            f"a checkpoint of {checkpoint.format} at {checkpoint.sample_rate} Hz cannot "
            f"continue {fmt} at {sample_rate} Hz"
        )
    if not checkpoint.started:
        # Nothing was returned yet: replay the input into a new encoder, which returns
        # nothing for it either (it holds back the same first record).
        encoder = _fresh(fmt, sample_rate)
        held = np.frombuffer(checkpoint.held, dtype="<i2").astype(np.float32) / 32767.0
        if held.size and encoder.encode(held):
            raise ValueError("this checkpoint's input makes bytes: it is not one of a new file")
        return encoder
    if fmt == "pcm":
        return PcmEncoder(sample_rate, resume=checkpoint)
    if fmt == "wav":
        return WavEncoder(sample_rate, resume=checkpoint)
    return SplicedEncoder(checkpoint, encoder_fingerprint(fmt, sample_rate))


def encoder_fingerprint(fmt: str, sample_rate: int = SAMPLE_RATE) -> str:
    """What a cast's encoders must agree on for a later attempt to continue its file: the
    format, the sample rate, the codec settings and the checkpoint version (not the library
    versions: a resumed lossy codec starts fresh at the splice anyway)."""
    check_format(fmt)
    if fmt == "mp3":
        return MP3_FINGERPRINT.format(rate=sample_rate)
    if fmt in ("wav", "pcm"):
        return f"{fmt}/{sample_rate}/s16le/r{VERSION}"
    return av_fingerprint(fmt, sample_rate)


def _fresh(fmt: str, sample_rate: int) -> Encoder:
    if fmt == "mp3":
        return Mp3Encoder(sample_rate)
    if fmt == "wav":
        return WavEncoder(sample_rate)
    if fmt == "pcm":
        return PcmEncoder(sample_rate)
    assert fmt in PROFILES
    return AvEncoder(fmt, sample_rate)
