"""The engine and encoder surface the worker uses, as Protocols.

`speechd.engine.Engine` and `speechd.audio.new_encoder` satisfy them; tests pass a cost-model
engine and a trivial encoder instead. Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from speechd.text import PlanStatus

__all__ = [
    "ChunkLike",
    "ChunkPolicyLike",
    "EncoderFactory",
    "EncoderLike",
    "EngineLike",
    "PlanStepLike",
    "PlannerLike",
    "SynthesisLike",
    "VoicesLike",
]


class ChunkLike(Protocol):
    @property
    def index(self) -> int: ...
    @property
    def text(self) -> str: ...
    @property
    def phonemes(self) -> str: ...


class ChunkPolicyLike(Protocol):
    """The engine's progressive chunking policy; `rtf` and `overhead_s` (compute per chunk)
    bound how fast chunks may grow, `max_chunk_s` caps them, and `speed` scales its estimate
    of a chunk's audio."""

    @property
    def rtf(self) -> float: ...
    def with_rtf(
        self, rtf: float, *, overhead_s: float = 0.0, max_chunk_s: float = 0.0
    ) -> ChunkPolicyLike: ...
    def with_speed(self, speed: float) -> ChunkPolicyLike: ...


class SynthesisLike(Protocol):
    @property
    def pcm(self) -> np.ndarray: ...


class VoicesLike(Protocol):
    @property
    def installed(self) -> list[str]: ...


class PlanStepLike(Protocol):
    @property
    def status(self) -> PlanStatus: ...
    @property
    def chunk(self) -> ChunkLike | None: ...


class PlannerLike(Protocol):
    """An incremental planner (`speechd.text.Planner`'s contract): text in, whole or piece
    by piece (`feed`, `close`), chunks out one bounded `step` at a time; `flush` when a live
    input idles, so what arrived is planned, an unfinished clause too; `position` after a
    chunk is where a planner of the same text continues from; `retime` cuts the chunks not
    cut yet with another timing of its policy; `estimate` sizes (in phonemes) the chunks the
    text not in a chunk yet is expected to make."""

    @property
    def closed(self) -> bool: ...
    @property
    def position(self) -> str: ...
    @property
    def audio_left_s(self) -> float: ...
    @property
    def chars_left(self) -> int: ...
    def feed(self, piece: str) -> None: ...
    def close(self) -> None: ...
    def flush(self) -> None: ...
    def step(self, idle_s: float | None = None) -> PlanStepLike: ...
    def retime(self, policy: ChunkPolicyLike) -> None: ...
    def estimate(self) -> list[int]: ...


class EngineLike(Protocol):
    """A synchronous, single-threaded synthesizer (one model: one call at a time)."""

    @property
    def sample_rate(self) -> int: ...
    @property
    def device(self) -> str: ...
    @property
    def voices(self) -> VoicesLike: ...

    def plan(self, text: str, voice: str, policy: ChunkPolicyLike) -> Sequence[ChunkLike]: ...

    def planner(
        self,
        voice: str,
        policy: ChunkPolicyLike,
        *,
        text: str = "",
        done: bool = False,
        position: str | None = None,
    ) -> PlannerLike:
        """An incremental planner for `voice`'s language; ValueError for a position it
        cannot read. A recipe read otherwise than as plain normalised text adds `ssml=True`
        or `normalize=False` (`open_plan`)."""
        ...

    def synthesize(
        self, chunk: ChunkLike, voice: str, speed: float, *, seed: int | None = None
    ) -> SynthesisLike:
        """One chunk's audio. For a chunk that may be cut short (a book's), the worker adds
        `stop=` (`speechd.engine.Stop`): once it is set, the call raises Preempted."""
        ...


class EncoderLike(Protocol):
    """Encodes one cast chunk by chunk; the outputs concatenated are one valid file.
    `checkpoint()` says how to continue that file after the outputs so far, and `fingerprint`
    what a checkpoint must match to be continued (see `speechd.audio`)."""

    @property
    def format(self) -> str: ...
    @property
    def fingerprint(self) -> str: ...
    def encode(self, pcm: np.ndarray, *, final: bool = False) -> bytes: ...
    def checkpoint(self) -> bytes: ...


class EncoderFactory(Protocol):
    """Makes a cast's encoder: a new file, or (`resume`: a checkpoint) one that continues the
    file that checkpoint was taken of. ValueError when the checkpoint cannot be continued."""

    def __call__(
        self, fmt: str, sample_rate: int, *, resume: bytes | None = None
    ) -> EncoderLike: ...
