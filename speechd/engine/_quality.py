"""How far one rendering of a chunk is from another: the measure a graph variant is held to
(`_variants`), the benchmark prints (loadtest/bench_engine.py) and the model tier's tests
bound. numpy only.

Waveforms are the wrong tool for this vocoder: its harmonic source turns F0 into phase by a
running sum, so a float rounding anywhere upstream shifts the phase of the whole rest of the
chunk, and two renderings that sound the same differ sample by sample (torch's own float32
is 0.6% RMS from its float64). What a listener hears is the spectrum's envelope over time,
so renderings are compared by their log-spectral distance:

    LSD = mean over frames of sqrt(mean over bins of (10 log10 P_a - 10 log10 P_b) ** 2)

P the power spectra of 1024-sample Hann frames (43 ms at 24 kHz) every 256 samples, each
floored at 80 dB below the reference's loudest bin (so two renderings' rounding noise in a
silent bin is not a distance), over the frames of the reference within 60 dB of its loudest
frame (digital silence has no spectrum to compare). Measured on the real weights, on this
measure: ONNX Runtime's float graph against torch's float32, ~0.1-0.3 dB; speechd's float
rewrites against the graph they came from, under 0.1 dB; an int8 vocoder, 1-3 dB.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = ["FLOOR_DB", "FRAME", "HOP", "SILENCE_DB", "log_spectral_distance"]

FRAME: Final = 1024
HOP: Final = 256
#: Power below the reference's loudest bin by more than this counts as this.
FLOOR_DB: Final = 80.0
#: Frames of the reference quieter than its loudest by more than this are left out.
SILENCE_DB: Final = 60.0


def _power(audio: npt.NDArray[np.floating]) -> npt.NDArray[np.float64]:
    samples = np.asarray(audio, dtype=np.float64).reshape(-1)
    if samples.size < FRAME:
        samples = np.pad(samples, (0, FRAME - samples.size))
    frames = np.lib.stride_tricks.sliding_window_view(samples, FRAME)[::HOP]
    spectrum = np.fft.rfft(frames * np.hanning(FRAME), axis=1)
    return np.asarray(spectrum.real**2 + spectrum.imag**2, dtype=np.float64)


def log_spectral_distance(
    audio: npt.NDArray[np.floating], reference: npt.NDArray[np.floating]
) -> float:
    """The log-spectral distance (dB) of `audio` from `reference` (see the module); the two
    are compared over the shorter one's length (a variant's durations are the reference's,
    so they are the same length). 0.0 for two silent signals."""
    n = min(np.size(audio), np.size(reference))
    mine, theirs = _power(np.reshape(audio, -1)[:n]), _power(np.reshape(reference, -1)[:n])
    peak = float(theirs.max(initial=0.0))
    if peak <= 0.0:
        return 0.0
    floor = peak * 10 ** (-FLOOR_DB / 10)
    energy = theirs.sum(axis=1)
    heard = energy >= energy.max() * 10 ** (-SILENCE_DB / 10)
    diff = 10 * np.log10(np.maximum(mine[heard], floor) / np.maximum(theirs[heard], floor))
    return float(np.mean(np.sqrt(np.mean(diff**2, axis=1))))
