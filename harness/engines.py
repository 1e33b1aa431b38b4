"""The engine test double, shared by the tests and the load tests: a cost-model engine and a
trivial encoder. Never in speechd/; the worker around it is always the real one.

The engine plans words progressively (2, 4, 8, ... words per chunk, `chunked_text` makes a text of a
given number of chunks), sleeps as long as the real model would compute (`overhead_s + rtf *
audio`), and returns seeded noise, so the same (chunk, seed) always gives the same samples, with its
words timed in proportion to their letters (`fake_words`). With `log`, every synthesis call appends
its chunk's text to that file (to count calls across worker processes). Given a `Stop`, it ends
early with Preempted once that is set. Texts can ask for trouble: a chunk containing POISON always
raises (the worker retries it, then ends the cast in `error`), FLAKY raises the first time only (per
engine), CRASH kills the process.

With a `batch_curve` (the cost per item by batch size, relative to batch 1: `GPU_CURVE` is
a GPU's), it also renders batches (`synthesize_batch`, as `speechd.engine.Engine` does):
a batch of n sleeps n * curve(n) times its longest item's cost alone, and each item is what
it would be alone (same noise, same words); a POISON item fails alone, a BATCH_BOOM item
makes the whole batch raise (the worker then makes its items one by one), CRASH kills the
process mid-batch. `batches` lists the texts of each batch it rendered.
"""

from __future__ import annotations

import functools
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from speechd.engine import Preempted, Stop
from speechd.engine._timing import WordTiming
from speechd.text import FLUSH_S
from speechd.worker import Parts
from speechd.worker._protocols import EncoderFactory

from .planner import FakePlanner

__all__ = [
    "GPU_CURVE",
    "SAMPLE_RATE",
    "VOICES",
    "CostEngine",
    "FakeChunk",
    "FakeChunkPolicy",
    "FakeEncoder",
    "FakeSynthesis",
    "FakeVoices",
    "GatedEngine",
    "chunked_text",
    "expected_audio",
    "fake_words",
    "load_engine",
    "noise",
    "parts",
]

SAMPLE_RATE = 24_000
VOICES = ("af_bella", "af_heart", "am_adam", "bf_emma")  # what the engine says is installed


class FakeChunk(msgspec.Struct, frozen=True):
    index: int
    text: str
    phonemes: str
    sources: tuple[tuple[int, int], ...] = ()
    """Where each of its words is in the text as planned (raw offsets)."""


class FakeChunkPolicy(msgspec.Struct, frozen=True):
    rtf: float = 1.0
    first_words: int = 2
    max_words: int = 16
    speed: float = 1.0
    overhead_s: float = 0.0
    max_chunk_s: float = 0.0

    def with_rtf(
        self, rtf: float, *, overhead_s: float = 0.0, max_chunk_s: float = 0.0
    ) -> FakeChunkPolicy:
        return msgspec.structs.replace(
            self, rtf=rtf, overhead_s=overhead_s, max_chunk_s=max_chunk_s
        )

    def with_speed(self, speed: float) -> FakeChunkPolicy:
        return msgspec.structs.replace(self, speed=speed)


@dataclass(frozen=True)
class FakeSynthesis:
    pcm: np.ndarray
    words: tuple[WordTiming, ...] = ()
    unit: str = "word"


def fake_words(
    text: str, samples: int, sources: tuple[tuple[int, int], ...] = ()
) -> tuple[WordTiming, ...]:
    """The cost model's word timings: each word (and the gap after it) takes its share of the
    samples by letters, the word itself all of it but one letter's worth; a word's `source`
    is its place in the text as planned, where the chunk says."""
    words = text.split()
    total = sum(len(w) + 1 for w in words)
    out, at = [], 0.0
    for i, word in enumerate(words):
        share = samples * (len(word) + 1) / total
        end = round(at + share * len(word) / (len(word) + 1))
        source = sources[i] if len(sources) == len(words) else (-1, -1)
        out.append(WordTiming(word, round(at), end, source))
        at += share
    return tuple(out)


class FakeVoices:
    installed = list(VOICES)
    default_voice = "af_heart"


GPU_CURVE = {1: 1.0, 2: 0.6, 4: 0.4, 8: 0.3, 16: 0.25}
"""Cost per item by batch size against batch 1, as published for batched Kokoro on a GPU
(2.9-3.8x throughput at batch 8-16)."""


def curve_factor(curve: dict[int, float], n: int) -> float:
    """`curve` at `n`, linear between the sizes it names (its last size's beyond them)."""
    sizes = sorted(curve)
    if n in curve:
        return curve[n]
    below = [s for s in sizes if s < n]
    above = [s for s in sizes if s > n]
    if not above:
        return curve[sizes[-1]]
    lo, hi = below[-1], above[0]
    return curve[lo] + (curve[hi] - curve[lo]) * (n - lo) / (hi - lo)


class CostEngine:
    sample_rate = SAMPLE_RATE
    device = "cpu"
    voices = FakeVoices()
    fingerprint = "cost-model"

    def __init__(
        self,
        *,
        overhead_s: float = 0.002,
        rtf: float = 0.02,
        audio_per_char: float = 0.02,
        silent: str = "",
        log: str = "",
        batch_curve: dict[int, float] | None = None,
    ) -> None:
        self.overhead_s = overhead_s
        self.rtf = rtf
        self.audio_per_char = audio_per_char
        self.silent = silent
        self.log = log  # a file each synthesis call appends its chunk's text to (across lives)
        self.calls: list[tuple[str, int | None]] = []
        self.plans: list[tuple[float, float, float]] = []  # (rtf, overhead_s, max_chunk_s)
        self.planners: list[tuple[str, FakePlanner]] = []  # (the text it was opened with, it)
        self._flaky_seen: set[str] = set()
        self.batch_curve = batch_curve
        self.batches: list[list[str]] = []  # each batch's texts (`synthesize_batch`)
        self.preempted: list[str] = []  # the texts of the chunks stopped mid-call
        self.prepared = 0

    @property
    def max_batch(self) -> int:
        return 16 if self.batch_curve else 1

    def prepare_batch(self, max_items: int) -> None:
        self.prepared = max_items

    def synthesize_batch(self, items: Any, *, isolate: bool = True) -> list[Any]:
        """Each item as `synthesize` makes it alone, in one sleep of the batch's cost."""
        if not self.batch_curve or len(items) == 1:
            out: list[Any] = []
            for item in items:
                try:
                    out.append(self.synthesize(item.chunk, item.voice, item.speed, seed=item.seed))
                except RuntimeError as exc:
                    out.append(exc)
            return out
        texts = [item.chunk.text for item in items]
        self.batches.append(texts)
        for text in texts:
            self.calls.append((text, None))
            if self.log:
                with open(self.log, "a", encoding="utf-8") as calls:
                    calls.write(text + "\n")
        if any("CRASH" in text for text in texts):
            os.kill(os.getpid(), signal.SIGKILL)
        if any("BATCH_BOOM" in text for text in texts):
            raise RuntimeError("the whole batch failed")
        costs = [
            self.overhead_s + self.rtf * self.audio_s(text, item.speed)
            for text, item in zip(texts, items, strict=True)
        ]
        time.sleep(len(items) * curve_factor(self.batch_curve, len(items)) * max(costs))
        results: list[Any] = []
        for item in items:
            if "POISON" in item.chunk.text:
                results.append(RuntimeError("this chunk is poisoned"))
                continue
            samples = round(self.audio_s(item.chunk.text, item.speed) * SAMPLE_RATE)
            sources = getattr(item.chunk, "sources", ())
            results.append(
                FakeSynthesis(
                    noise(item.seed, samples), fake_words(item.chunk.text, samples, sources)
                )
            )
        return results

    def plan(self, text: str, voice: str, policy: FakeChunkPolicy) -> list[FakeChunk]:
        if voice not in self.voices.installed:
            raise ValueError(f"unknown voice {voice!r}")
        self.plans.append((policy.rtf, policy.overhead_s, policy.max_chunk_s))
        words = text.split() if text.strip() != self.silent else []
        chunks: list[FakeChunk] = []
        size = policy.first_words
        while words:
            part, words = words[:size], words[size:]
            joined = " ".join(part)
            chunks.append(FakeChunk(len(chunks), joined, joined.lower()))
            size = min(size * 2, policy.max_words)
        return chunks

    def planner(
        self,
        voice: str,
        policy: FakeChunkPolicy,
        *,
        text: str = "",
        done: bool = False,
        position: str | None = None,
        flush_s: float = FLUSH_S,
        ssml: bool = False,
        normalize: bool = True,
    ) -> FakePlanner:
        """The incremental planner (`harness.planner`): a closed text plans as `plan`
        does; text fed piece by piece is cut at clause ends as the real planner cuts it. The
        cost model reads every text as plain words (`ssml` and `normalize` change nothing)."""
        if voice not in self.voices.installed:
            raise ValueError(f"unknown voice {voice!r}")
        self.plans.append((policy.rtf, policy.overhead_s, policy.max_chunk_s))
        planner = FakePlanner(
            policy.first_words,
            policy.max_words,
            text=text,
            done=done,
            position=position,
            flush_s=flush_s,
            audio_per_char=self.audio_per_char,
            speed=policy.speed,
            silent=self.silent,
            chunk_type=FakeChunk,
        )
        self.planners.append((text, planner))
        return planner

    def audio_s(self, text: str, speed: float) -> float:
        return len(text) * self.audio_per_char / speed

    def synthesize(
        self,
        chunk: FakeChunk,
        voice: str,
        speed: float,
        *,
        seed: int | None = None,
        stop: Stop | None = None,
    ) -> FakeSynthesis:
        self.calls.append((chunk.text, seed))
        if self.log:
            with open(self.log, "a", encoding="utf-8") as calls:
                calls.write(chunk.text + "\n")
        if "CRASH" in chunk.text:
            os.kill(os.getpid(), signal.SIGKILL)
        if "POISON" in chunk.text:
            raise RuntimeError("this chunk is poisoned")
        if "FLAKY" in chunk.text and chunk.text not in self._flaky_seen:
            self._flaky_seen.add(chunk.text)
            raise RuntimeError("a transient failure")
        audio_s = self.audio_s(chunk.text, speed)
        self.compute(self.overhead_s + self.rtf * audio_s, chunk, stop)
        samples = round(audio_s * SAMPLE_RATE)
        sources = getattr(chunk, "sources", ())
        return FakeSynthesis(noise(seed, samples), fake_words(chunk.text, samples, sources))

    def compute(self, seconds: float, chunk: FakeChunk, stop: Stop | None) -> None:
        """Take `seconds`, as the model would; with `stop`, looked at every few
        milliseconds, as the real runtimes look at theirs between steps (Preempted, and the
        chunk's text in `preempted`, once it is set)."""
        if stop is None:
            time.sleep(seconds)
            return
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            if stop.is_set():
                self.preempted.append(chunk.text)
                raise Preempted
            time.sleep(min(left, 0.005))


def noise(seed: int | None, samples: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(samples) * 0.1).astype(np.float32)


class FakeEncoder:
    """A header on the first output, 16-bit samples, a trailer on the final one. Its
    checkpoint says whether the header went out; continuing from one writes none again."""

    def __init__(self, fmt: str, sample_rate: int, *, resume: bytes | None = None) -> None:
        if fmt not in ("pcm", "wav", "mp3"):
            raise ValueError(f"unknown format {fmt!r}")
        if resume is not None and resume not in (b"fake:0", b"fake:1"):
            raise ValueError(f"not a checkpoint of this encoder: {resume!r}")
        self.format = fmt
        self.fingerprint = f"fake/{fmt}"
        self._started = resume == b"fake:1"

    def encode(self, pcm: np.ndarray, *, final: bool = False) -> bytes:
        head = b"" if self._started else b"HEAD"
        self._started = True
        body = (np.clip(pcm, -1, 1) * 32767).astype("<i2").tobytes()
        return head + body + (b"TAIL" if final else b"")

    def checkpoint(self) -> bytes:
        return b"fake:1" if self._started else b"fake:0"


def load_engine(config: object, **settings: float | str) -> CostEngine:
    return CostEngine(**settings)  # type: ignore[arg-type]


def parts(*, encoders: EncoderFactory = FakeEncoder, **settings: float | str) -> Parts:
    """Parts for a worker process running the cost model (picklable for spawn when
    `encoders` is module-level, as `speechd.audio.new_encoder` is)."""
    return Parts(
        load_engine=functools.partial(load_engine, **settings),
        chunk_policy=FakeChunkPolicy,
        encoders=encoders,
    )


def chunked_text(chunks: int) -> str:
    """A text the engine plans into exactly `chunks` chunks (with the default policy)."""
    policy = FakeChunkPolicy()
    sizes, size = [], policy.first_words
    for _ in range(chunks):
        sizes.append(size)
        size = min(size * 2, policy.max_words)
    return " ".join(f"word{n}" for n in range(sum(sizes)))


def expected_audio(
    cast_id: str,
    text: str,
    *,
    speed: float = 1.0,
    fmt: str = "pcm",
    encoders: Callable[[str, int], Any] = FakeEncoder,
    engine: CostEngine | None = None,
) -> bytes:
    """The bytes a cast of `text` must hold: the same plan, seeds and encoder as the worker."""
    from speechd.worker import chunk_seed
    from speechd.worker._render import MAX_RECORD_S

    engine = engine or CostEngine()
    chunks = engine.plan(text, "af_heart", FakeChunkPolicy())
    encoder = encoders(fmt, SAMPLE_RATE)
    if not chunks:
        return encoder.encode(np.zeros(0, np.float32), final=True)
    out = b""
    for n, chunk in enumerate(chunks):
        pcm = noise(
            chunk_seed(cast_id, chunk.index), round(engine.audio_s(chunk.text, speed) * SAMPLE_RATE)
        )
        parts_ = max(1, -(-pcm.size // int(MAX_RECORD_S * SAMPLE_RATE)))
        pieces = np.array_split(pcm, parts_)
        for i, piece in enumerate(pieces):
            out += encoder.encode(piece, final=n == len(chunks) - 1 and i == len(pieces) - 1)
    return out


class GatedEngine(CostEngine):
    """Blocks in `synthesize` on chunks containing `block` until `gate` is set."""

    def __init__(self, block: str, gate: threading.Event, **settings: float) -> None:
        super().__init__(**settings)
        self.block = block
        self.gate = gate
        self.blocked = threading.Event()

    def synthesize(
        self, chunk: FakeChunk, voice: str, speed: float, *, seed: int | None = None
    ) -> FakeSynthesis:
        if self.block in chunk.text:
            self.blocked.set()
            self.gate.wait()
        return super().synthesize(chunk, voice, speed, seed=seed)
