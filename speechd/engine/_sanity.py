"""The sanity check at load: does the accelerator speak as the CPU does?

A CUDA build can be wrong without failing: on JetPack 5 one was measured predicting Kokoro's
durations about 27% short, so every word came out rushed and nothing said so. At load, on any
device but the CPU, the engine makes a fixed sentence's durations and a short chunk's audio on
the device and on the CPU (the same runtime, weights, voice and seed) and compares them:

* durations: the total of the device's predicted frames within `DURATION_TOLERANCE` of the
  CPU's, and at most `TOKENS_OFF_TOLERANCE` of the tokens more than one frame apart (float
  arithmetic may tip a rounding here and there, never the timing of a sentence);
* audio: the short chunk's long-term spectra (mean power per frequency up to 8 kHz, in dB)
  within `SPECTRUM_TOLERANCE_DB` on average, and its loudness within `LEVEL_TOLERANCE_DB`.
  The spectrum rather than the samples: a GPU's float arithmetic shifts phases, which
  changes samples but not speech. Measured on the real weights here: torch against ONNX
  Runtime (both on the CPU, the same speech in other arithmetic) differ by 0.01 dB, another
  seed by 0.15-0.2 dB, the same text at speed 1.3 by 1.6 dB, another voice by 5.4 dB and
  noise of the same loudness by 9.7 dB.

`sanity_check` (in `_loading`, where the engine is loaded) makes those runs and `compare`
reads them. A device outside those bounds is refused with a one-line reason
(`SanityReport.problem`), or left for the CPU under `--device auto`
(`ResidentRuntime.fall_back`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from ._config import SAMPLE_RATE
from ._runtime import SAMPLES_PER_FRAME, Inference

__all__ = [
    "DURATION_TOLERANCE",
    "LEVEL_TOLERANCE_DB",
    "SANITY_SENTENCE",
    "SANITY_SHORT",
    "SPECTRUM_TOLERANCE_DB",
    "TOKENS_OFF_TOLERANCE",
    "SanityReport",
    "compare",
]

#: The fixed sentence whose durations are compared, and the short chunk whose audio is.
SANITY_SENTENCE: Final = (
    "Before it speaks, this device must time every word just as the processor does."
)
SANITY_SHORT: Final = "Hello, this is a short check."
DURATION_TOLERANCE: Final = 0.05
TOKENS_OFF_TOLERANCE: Final = 0.10
SPECTRUM_TOLERANCE_DB: Final = 1.5
LEVEL_TOLERANCE_DB: Final = 3.0
_FFT: Final = 512
_TOP_HZ: Final = 8000


@dataclass(frozen=True)
class SanityReport:
    """What the check measured on `device` against the CPU."""

    device: str
    frames: int
    """The device's predicted frames (25 ms each) for `SANITY_SENTENCE`."""
    reference_frames: int
    """... and the CPU's."""
    tokens_off: float
    """Share of the sentence's tokens whose durations differ by more than one frame."""
    spectrum_db: float
    """Mean absolute difference of the short chunk's long-term spectra (dB, up to 8 kHz);
    inf when the device's audio is not finite or silent."""
    level_db: float
    """The short chunk's loudness on the device minus on the CPU (dB)."""
    seconds: float = 0.0

    @property
    def duration_ratio(self) -> float:
        """The device's frames over the CPU's (1.0: the same timing)."""
        return self.frames / self.reference_frames if self.reference_frames else math.inf

    @property
    def problem(self) -> str | None:
        """Why the device must not speak, in one line; None when it passed."""
        ratio = self.duration_ratio
        if not abs(ratio - 1.0) <= DURATION_TOLERANCE:
            way = "shorter" if ratio < 1 else "longer"
            return (
                f"{self.device} predicts durations {abs(1 - ratio):.0%} {way} than the CPU "
                f"for a fixed sentence ({self.frames} frames against {self.reference_frames}; "
                f"tolerance {DURATION_TOLERANCE:.0%}): this build would speak wrongly"
            )
        if self.tokens_off > TOKENS_OFF_TOLERANCE:
            return (
                f"{self.device} times {self.tokens_off:.0%} of a fixed sentence's sounds more "
                f"than a frame away from the CPU (tolerance {TOKENS_OFF_TOLERANCE:.0%})"
            )
        if not self.spectrum_db <= SPECTRUM_TOLERANCE_DB:
            return (
                f"{self.device}'s audio for a short chunk differs from the CPU's by "
                f"{self.spectrum_db:.1f} dB across its spectrum (tolerance "
                f"{SPECTRUM_TOLERANCE_DB:g} dB)"
            )
        if not abs(self.level_db) <= LEVEL_TOLERANCE_DB:
            return (
                f"{self.device}'s audio for a short chunk is {self.level_db:+.1f} dB louder than "
                f"the CPU's (tolerance {LEVEL_TOLERANCE_DB:g} dB)"
            )
        return None

    def describe(self) -> str:
        """The figures, for a log line and scripts/gpu_check."""
        return (
            f"durations {self.frames}/{self.reference_frames} frames "
            f"({self.duration_ratio - 1:+.1%}), {self.tokens_off:.0%} of tokens off by >1 "
            f"frame, spectrum {self.spectrum_db:.2f} dB, level {self.level_db:+.2f} dB, "
            f"{self.seconds:.1f} s"
        )


def _frames(made: Inference) -> npt.NDArray[np.int64]:
    if made.durations is not None:
        return np.asarray(made.durations, dtype=np.int64)
    return np.array([made.audio.size // SAMPLES_PER_FRAME], dtype=np.int64)


def _spectrum(pcm: npt.NDArray[np.float32]) -> npt.NDArray[np.float64] | None:
    """Mean power per frequency bin up to `_TOP_HZ` over the frames within 40 dB of the
    loudest, in dB; None when there is nothing to measure (silent, too short, not finite)."""
    pcm = np.asarray(pcm, dtype=np.float64).reshape(-1)
    if pcm.size < _FFT or not np.isfinite(pcm).all():
        return None
    frames = np.lib.stride_tricks.sliding_window_view(pcm, _FFT)[:: _FFT // 2]
    power = np.abs(np.fft.rfft(frames * np.hanning(_FFT), axis=1)) ** 2
    energy = power.sum(axis=1)
    if not energy.max() > 0:
        return None
    kept = power[energy > energy.max() * 1e-4]
    top = _FFT * _TOP_HZ // SAMPLE_RATE
    return np.asarray(10 * np.log10(kept.mean(axis=0)[:top] + 1e-12))


def _level_db(device: npt.NDArray[np.float32], cpu: npt.NDArray[np.float32]) -> float:
    def rms(pcm: npt.NDArray[np.float32]) -> float:
        return float(np.sqrt(np.mean(np.square(pcm, dtype=np.float64)))) if pcm.size else 0.0

    ours, theirs = rms(device), rms(cpu)
    if not (ours > 0 and theirs > 0 and math.isfinite(ours)):
        return math.inf
    return 20 * math.log10(ours / theirs)


def compare(
    device: str, made: tuple[Inference, Inference], cpu: tuple[Inference, Inference]
) -> SanityReport:
    """The report for the sentence and the short chunk as the device and the CPU made them
    (a token count apart, the timing cannot be compared token by token: all count as off)."""
    ours, theirs = _frames(made[0]), _frames(cpu[0])
    off = float(np.mean(np.abs(ours - theirs) > 1)) if ours.size == theirs.size else 1.0
    a, b = _spectrum(made[1].audio), _spectrum(cpu[1].audio)
    spectrum = math.inf if a is None or b is None else float(np.mean(np.abs(a - b)))
    return SanityReport(
        device=device,
        frames=int(ours.sum()),
        reference_frames=int(theirs.sum()),
        tokens_off=off,
        spectrum_db=spectrum,
        level_db=_level_db(made[1].audio, cpu[1].audio),
    )
