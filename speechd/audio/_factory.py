"""`new_encoder`: one encoder per cast, picked by response format."""

from __future__ import annotations

from ._av import PROFILES, AvEncoder
from ._base import Encoder
from ._formats import SAMPLE_RATE, check_format
from ._mp3 import Mp3Encoder
from ._raw import PcmEncoder, WavEncoder

__all__ = ["new_encoder"]


def new_encoder(fmt: str, sample_rate: int = SAMPLE_RATE) -> Encoder:
    """A fresh encoder for one cast in `fmt` (InvalidRequest(param="response_format") if
    unknown; ValueError for a sample rate outside SAMPLE_RATES)."""
    check_format(fmt)
    if fmt == "mp3":
        return Mp3Encoder(sample_rate)
    if fmt == "wav":
        return WavEncoder(sample_rate)
    if fmt == "pcm":
        return PcmEncoder(sample_rate)
    assert fmt in PROFILES
    return AvEncoder(fmt, sample_rate)
