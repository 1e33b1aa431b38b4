"""Reading speech back with an offline recogniser: pocketsphinx's bundled en-us model (a word
recall around 0.8 on an English voice catches broken audio that duration and loudness checks
miss)."""

from __future__ import annotations

import re

import numpy as np

__all__ = ["recall", "transcribe_pcm16"]


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


def recall(reference: str, heard: str) -> float:
    """The share of `reference`'s words that `heard` holds."""
    got = set(_words(heard))
    words = _words(reference)
    return sum(w in got for w in words) / len(words)


def transcribe_pcm16(pcm: bytes, rate: int) -> str:
    """What pocketsphinx hears in s16le mono `pcm` at `rate` (band-limited to 16 kHz)."""
    from pocketsphinx import Decoder

    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float64) / 32768
    n = len(samples)
    m = n * 16_000 // rate
    spectrum = np.fft.rfft(samples)
    resampled = np.fft.irfft(spectrum[: m // 2 + 1], m) * (m / n)
    raw = (np.clip(resampled, -1, 1) * 32767).astype("<i2").tobytes()
    decoder = Decoder(samprate=16_000, loglevel="FATAL")
    decoder.start_utt()
    decoder.process_raw(raw, full_utt=True)
    decoder.end_utt()
    hypothesis = decoder.hyp()
    return hypothesis.hypstr if hypothesis is not None else ""
