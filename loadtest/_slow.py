"""A device slower than real time, as a cost model: speechd's own planning, a synthesis that
sleeps as long as such a device would compute.

`SlowEngine` plans exactly as the real engine does (speechd's normaliser, G2P and progressive
chunks, through `speechd.text.Planner`; no weights, no torch), and `synthesize` sleeps
`overhead_s + rtf * audio` for a chunk of `audio` seconds, then returns a quiet tone of that
length. A chunk of `t` phonemes makes `(PAD_S + t / TOKENS_PER_S) / speed` seconds (Kokoro-82M's
English, roughly: 250 phonemes are about 14 s). Sleeping takes no CPU, so the servers measured
on a 2-core box compete for nothing but their own bookkeeping, and the figures show what
scheduling and chunking make of a slow device.

With a `batch_curve` (the cost per item by batch size against batch 1; `GPU_CURVE` follows
the published figures for batched Kokoro on a GPU: ~0.3x per item at batch 8) it also
renders batches (`synthesize_batch`): a batch of n sleeps n * curve(n) times its longest
item's cost alone, so padding counts. A worker on it measures that curve at warm-up
(`--max-batch auto`) as it would a GPU's: the GPU-like cost model of `python -m loadtest run
--cost-model gpu`.

`load_slow_engine` is what a worker process loads in its place (`loadtest.slow_serve`), and
`slow_raw` is the raw loop on it: every text made back to back in the fewest model calls, the
engine's own speed (the cost model's arithmetic: no sleeping needed to know it).
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from speechd.engine import DEFAULT_VOICE_MAP, SAMPLE_RATE, EngineConfig, Synthesis, VoiceBook
from speechd.text import ChunkPolicy, Planner

__all__ = [
    "GPU_CURVE",
    "OVERHEAD_S",
    "RTF",
    "WHOLE",
    "SlowEngine",
    "SlowRaw",
    "load_slow_engine",
    "slow_raw",
]

RTF = 1.3
"""Compute seconds per audio second: torch's Kokoro-82M on a 2-core CPU without AVX-512."""
OVERHEAD_S = 0.4
"""The fixed price of a model call (the worker measured 0.28-0.7 s on such CPUs)."""
PAD_S = 0.25
TOKENS_PER_S = 18.0
VOICES = ("af_heart", "af_bella", "am_adam", "bf_emma")

GPU_CURVE: dict[int, float] = {1: 1.0, 2: 0.6, 4: 0.4, 8: 0.3, 16: 0.25}
"""Cost per item by batch size against batch 1, as published for batched Kokoro on a GPU
(masked AdaIN, packed LSTMs: 2.9-3.8x throughput at batch 8-16)."""

#: One chunk per 510-token span: the fewest model calls, the engine's own speed.
WHOLE = ChunkPolicy(
    first_tokens=510,
    first_max_tokens=510,
    min_tokens=510,
    sentence_tokens=510,
    max_tokens=510,
    rtf=0,
)


class SlowEngine:
    """The engine surface the worker uses, on a simulated slow device (see the module)."""

    sample_rate = SAMPLE_RATE
    device = "cpu"

    def __init__(
        self,
        *,
        rtf: float = RTF,
        overhead_s: float = OVERHEAD_S,
        square_s: float = 0.0,
        default_voice: str = "af_heart",
        voice_map: dict[str, str] | None = None,
        batch_curve: dict[int, float] | None = None,
    ) -> None:
        self.batch_curve = dict(batch_curve or {})
        self.rtf = rtf
        self.overhead_s = overhead_s
        self.square_s = square_s
        self.voices = VoiceBook(
            VOICES,
            voice_map=DEFAULT_VOICE_MAP if voice_map is None else voice_map,
            default_voice=default_voice,
        )
        self._g2p: dict[str, Any] = {}
        self._lock = threading.Lock()

    def audio_s(self, tokens: int, speed: float = 1.0) -> float:
        return (PAD_S + tokens / TOKENS_PER_S) / speed

    def compute_s(self, tokens: int, speed: float = 1.0) -> float:
        return self._cost(self.audio_s(tokens, speed))

    def _cost(self, audio: float) -> float:
        return self.overhead_s + self.rtf * audio + self.square_s * audio * audio

    def planner(self, voice: str, policy: ChunkPolicy | None = None, **kwargs: Any) -> Planner:
        return Planner(self._g2p_for(self.voices.language(voice)), policy, **kwargs)

    def plan(self, text: str, voice: str, policy: ChunkPolicy | None = None) -> list[Any]:
        return list(self.planner(voice, policy, text=text, done=True).chunks())

    def warm_up(self, voice: str | None = None) -> None:
        self._g2p_for(self.voices.language(voice or self.voices.default_voice))

    def synthesize(
        self, chunk: Any, voice: str, speed: float = 1.0, *, seed: int | None = None
    ) -> Synthesis:
        audio = self.audio_s(len(chunk.phonemes), speed)
        time.sleep(self._cost(audio))
        return self._tone(audio)

    @property
    def max_batch(self) -> int:
        return max(self.batch_curve, default=1)

    def prepare_batch(self, max_items: int) -> None:
        pass  # nothing to open: the curve is arithmetic

    def synthesize_batch(self, items: Sequence[Any], *, isolate: bool = True) -> list[Any]:
        """Each item as `synthesize` makes it, in one sleep of n * curve(n) times the
        longest item's cost alone."""
        if len(items) <= 1 or not self.batch_curve:
            return [self.synthesize(i.chunk, i.voice, i.speed, seed=i.seed) for i in items]
        audio = [self.audio_s(len(i.chunk.phonemes), i.speed) for i in items]
        time.sleep(len(items) * self._factor(len(items)) * max(map(self._cost, audio)))
        return [self._tone(a) for a in audio]

    def _factor(self, n: int) -> float:
        sizes = sorted(self.batch_curve)
        lower = max((s for s in sizes if s <= n), default=1)
        upper = min((s for s in sizes if s >= n), default=lower)
        if upper == lower:
            return self.batch_curve.get(lower, 1.0)
        low, high = self.batch_curve[lower], self.batch_curve[upper]
        return low + (high - low) * (n - lower) / (upper - lower)

    @staticmethod
    def _tone(audio: float) -> Synthesis:
        samples = round(audio * SAMPLE_RATE)
        tone = 0.05 * np.sin(np.arange(samples, dtype=np.float32) * np.float32(0.0523))
        return Synthesis(tone.astype(np.float32))

    def _g2p_for(self, lang: str) -> Any:
        from speechd.text import build_g2p  # what Engine builds, minus the model

        with self._lock:
            if lang not in self._g2p:
                with warnings.catch_warnings():  # torch, spaCy and misaki loading, not ours
                    warnings.simplefilter("ignore", DeprecationWarning)
                    warnings.simplefilter("ignore", FutureWarning)
                    warnings.simplefilter("ignore", UserWarning)
                    self._g2p[lang] = build_g2p(lang)
            return self._g2p[lang]


def load_slow_engine(
    config: EngineConfig,
    *,
    rtf: float,
    overhead_s: float,
    batch_curve: dict[int, float] | None = None,
) -> SlowEngine:
    """A worker's engine loader (`speechd.worker.Parts.load_engine`) for the slow device (or,
    with `batch_curve`, a device that batches)."""
    engine = SlowEngine(
        rtf=rtf,
        overhead_s=overhead_s,
        batch_curve=batch_curve,
        default_voice=config.default_voice,
        voice_map=dict(config.voice_map),
    )
    engine.warm_up()
    return engine


@dataclass(frozen=True)
class SlowRaw:
    audio_s: float
    gen_s: float
    chunks: int

    @property
    def rtf(self) -> float:
        return self.gen_s / self.audio_s

    @property
    def capacity(self) -> float:
        """Audio seconds per wall second."""
        return self.audio_s / self.gen_s


def slow_raw(engine: SlowEngine, texts: Sequence[str], voice: str = "af_heart") -> SlowRaw:
    """Every text made back to back in the fewest model calls: the engine's own speed."""
    audio = gen = 0.0
    chunks = 0
    for text in texts:
        for chunk in engine.plan(text, voice, WHOLE):
            audio += engine.audio_s(len(chunk.phonemes))
            gen += engine.compute_s(len(chunk.phonemes))
            chunks += 1
    return SlowRaw(audio, gen, chunks)
