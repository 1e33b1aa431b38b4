"""What an offline recogniser hears: pocketsphinx's bundled en-us model (tier `model`)."""

from __future__ import annotations

import re

import numpy as np
import numpy.typing as npt

__all__ = ["heard_words", "transcribe"]


def transcribe(pcm: npt.NDArray[np.float32], rate: int) -> str:
    """pocketsphinx's bundled en-us model on 16 kHz signed 16-bit mono."""
    from pocketsphinx import Decoder

    n = len(pcm)
    m = n * 16_000 // rate
    spectrum = np.fft.rfft(pcm.astype(np.float64))  # band-limited resampling to 16 kHz
    resampled = np.fft.irfft(spectrum[: m // 2 + 1], m) * (m / n)
    raw = (np.clip(resampled, -1, 1) * 32767).astype("<i2").tobytes()
    decoder = Decoder(samprate=16_000, loglevel="FATAL")
    decoder.start_utt()
    decoder.process_raw(raw, full_utt=True)
    decoder.end_utt()
    hypothesis = decoder.hyp()
    return hypothesis.hypstr if hypothesis is not None else ""


def heard_words(pcm: npt.NDArray[np.float32], rate: int) -> list[str]:
    """The words pocketsphinx hears, lower case."""
    return re.findall(r"[a-z']+", transcribe(pcm, rate).lower())
