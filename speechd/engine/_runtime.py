"""What a runtime is, and the host-side steps the torch and ONNX Runtime runtimes share.

A runtime turns a chunk's phoneme tokens, a style vector, a speed and a seed into the model's
raw audio and its predicted durations (`Runtime.infer`). Everything around that (voices and
blends, G2P, planning, trimming, word timing) is the engine's, the same for every runtime.

Both of speechd's runtimes run Kokoro in two halves (`_split`): a front that predicts each
token's duration, and a back that decodes the aligned frames to audio. Between the two the
host (`infer_in_two_stages`) builds the alignment (the token index of every frame) and draws
the decoder's random inputs (harmonic phases and noise) from the seed, so the same chunk,
voice, speed and seed give the same audio, on either runtime.

A runtime may also run several chunks in one pass (`Runtime.infer_batch`, `max_batch` > 1):
the same two halves, padded and masked (`_split_batch`), the host building each item's
alignment and drawing each item's random inputs from its own seed exactly as alone
(`infer_batch_in_two_stages`), so an item's audio does not depend on its batch-mates.

What it does not do: shorten the ~14 frames (0.35 s) of silence Kokoro gives the marker
before every utterance, which the engine's trim cuts to 50 ms after decoding. Decoding them
costs as much as decoding speech, but the decoder needs them: shortened to 12 frames before
decoding, word recall of the English test sentences (tests/engine/test_model.py, pocketsphinx)
fell from 0.96 to 0.93, to 0.85 at 10 frames and 0.76 at 4.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Final, NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from ._stop import Stop

__all__ = [
    "HARMONICS",
    "MAX_BATCH",
    "SAMPLES_PER_FRAME",
    "BatchStages",
    "Inference",
    "Request",
    "Runtime",
    "TwoStages",
    "excitation",
    "infer_batch_in_two_stages",
    "infer_in_two_stages",
]

#: Kokoro makes 600 samples (25 ms at 24 kHz) of audio per predicted duration frame.
SAMPLES_PER_FRAME: Final = 600
#: The harmonic source's partials (Kokoro's SineGen: harmonic_num 8, plus the fundamental).
HARMONICS: Final = 9
#: The most chunks a batching runtime runs in one pass.
MAX_BATCH: Final = 16


class Inference(NamedTuple):
    """A runtime's output for one chunk."""

    audio: npt.NDArray[np.float32]
    """Mono float32 at 24 kHz: everything the model made, edges included."""
    durations: npt.NDArray[np.int64] | None
    """Frames (600 samples) per token, the start and end markers included, summing to
    len(audio) / 600; None when the runtime cannot tell (a foreign ONNX export without that
    output)."""


class Request(NamedTuple):
    """One chunk of a batch, as a runtime takes it (see `Runtime.infer`)."""

    tokens: Sequence[int]
    style: npt.NDArray[np.float32]
    speed: float
    seed: int | None


class Runtime(Protocol):
    """One way of running Kokoro-82M. Synchronous, one call at a time."""

    name: str
    """The runtime's name: "torch" or "onnx"."""
    device: str
    """Where it runs: "cpu", "cuda" or "cuda:N"."""
    detail: str
    """What a log line should say about it (providers, threads)."""
    fingerprint: str
    """What the engine's fingerprint adds to the weights' name: the runtime ("torch",
    "onnx"), and for a foreign ONNX export, that file (its own weights and noise)."""

    def infer(
        self, tokens: Sequence[int], style: npt.NDArray[np.float32], speed: float, seed: int | None
    ) -> Inference:
        """Audio for phoneme `tokens` (vocabulary ids, without the markers) read with `style`
        (1, 256) at `speed`. Library failures are raised as CastFailed."""
        ...

    def stoppable(self, stop: Stop) -> AbstractContextManager[None]:
        """While inside, `stop` ends the call in flight early with `Preempted` (`_stop`)."""
        ...

    @property
    def max_batch(self) -> int:
        """The most requests `infer_batch` takes in one pass; 1: it cannot batch (a foreign
        or older ONNX export), and the engine runs every chunk alone."""
        ...

    def prepare_batch(self, max_items: int) -> None:
        """Hold what batches of up to `max_items` need (> 1: open it now, not at the first
        batch), or let it go (1). CastFailed when it cannot be had."""
        ...

    def infer_batch(self, requests: Sequence[Request]) -> list[Inference]:
        """`infer` for 2 to `max_batch` requests in one pass: each result as its request
        alone would give it, up to float rounding (durations identical). A library failure
        fails the whole pass (CastFailed); the engine then runs the items alone."""
        ...


class TwoStages(Protocol):
    """The two halves of `_split`, on some runtime; arrays in and out are numpy."""

    def front(
        self, input_ids: npt.NDArray[np.int64], style: npt.NDArray[np.float32], speed: float
    ) -> tuple[npt.NDArray[np.int64], Any]:
        """(durations, the state `back` needs)."""
        ...

    def back(
        self,
        state: Any,
        frames: npt.NDArray[np.int64],
        style: npt.NDArray[np.float32],
        phase: npt.NDArray[np.float32],
        noise: npt.NDArray[np.float32],
    ) -> npt.NDArray[np.float32]: ...


class BatchStages(Protocol):
    """The two halves of `_split_batch`, on some runtime: `TwoStages` with a batch
    dimension, the lengths of the rows, and per-row style, speed, phases and noise."""

    def front_batch(
        self,
        input_ids: npt.NDArray[np.int64],
        lengths: npt.NDArray[np.int64],
        style: npt.NDArray[np.float32],
        speed: npt.NDArray[np.float32],
    ) -> tuple[npt.NDArray[np.int64], Any]:
        """(durations (B, T), the state `back_batch` needs)."""
        ...

    def back_batch(
        self,
        state: Any,
        frames: npt.NDArray[np.int64],
        frame_lengths: npt.NDArray[np.int64],
        style: npt.NDArray[np.float32],
        phase: npt.NDArray[np.float32],
        noise: npt.NDArray[np.float32],
    ) -> npt.NDArray[np.float32]:
        """Audio (B, frames * 600), each row valid up to its frame_lengths * 600."""
        ...


def excitation(
    seed: int | None, samples: int
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """The decoder's random inputs for `samples` of audio: initial phases (1, 9), uniform in
    [0, 1) but 0 for the fundamental (as Kokoro's SineGen draws them), and standard normal
    noise (1, samples, 1). `seed` None draws fresh ones."""
    rng = np.random.default_rng(None if seed is None else seed & 0xFFFF_FFFF_FFFF_FFFF)
    phase = np.zeros((1, HARMONICS), dtype=np.float32)
    phase[0, 1:] = rng.random(HARMONICS - 1, dtype=np.float32)
    noise = rng.standard_normal((1, samples, 1), dtype=np.float32)
    return phase, noise


def infer_in_two_stages(
    stages: TwoStages,
    tokens: Sequence[int],
    style: npt.NDArray[np.float32],
    speed: float,
    seed: int | None,
) -> Inference:
    input_ids = np.array([[0, *tokens, 0]], dtype=np.int64)
    durations, state = stages.front(input_ids, style, speed)
    durations = np.array(durations, dtype=np.int64).reshape(-1)
    frames = np.repeat(np.arange(durations.size, dtype=np.int64), durations)
    phase, noise = excitation(seed, frames.size * SAMPLES_PER_FRAME)
    audio = stages.back(state, frames, style, phase, noise)
    return Inference(np.ascontiguousarray(audio, dtype=np.float32).reshape(-1), durations)


def infer_batch_in_two_stages(stages: BatchStages, requests: Sequence[Request]) -> list[Inference]:
    """`infer_in_two_stages` for several requests in one pass of each half: tokens padded
    to the longest, frames to the most, each row's phases and noise drawn from its own seed
    as `excitation` draws them alone (the noise past a row's end is zero and never read)."""
    count = len(requests)
    lengths = np.array([len(r.tokens) + 2 for r in requests], dtype=np.int64)
    input_ids = np.zeros((count, int(lengths.max())), dtype=np.int64)  # 0: the markers, padding
    for row, request in enumerate(requests):
        input_ids[row, 1 : 1 + len(request.tokens)] = request.tokens
    style = np.concatenate([np.asarray(r.style, dtype=np.float32).reshape(1, -1) for r in requests])
    speed = np.array([r.speed for r in requests], dtype=np.float32)
    durations, state = stages.front_batch(input_ids, lengths, style, speed)
    per_item = [np.asarray(durations[row, :n], dtype=np.int64) for row, n in enumerate(lengths)]
    frame_lengths = np.array([int(d.sum()) for d in per_item], dtype=np.int64)
    frames = np.zeros((count, int(frame_lengths.max())), dtype=np.int64)
    phase = np.zeros((count, HARMONICS), dtype=np.float32)
    noise = np.zeros((count, frames.shape[1] * SAMPLES_PER_FRAME, 1), dtype=np.float32)
    for row, (request, item) in enumerate(zip(requests, per_item, strict=True)):
        frames[row, : frame_lengths[row]] = np.repeat(np.arange(item.size, dtype=np.int64), item)
        samples = int(frame_lengths[row]) * SAMPLES_PER_FRAME
        phase[row], noise[row, :samples] = (a[0] for a in excitation(request.seed, samples))
    audio = stages.back_batch(state, frames, frame_lengths, style, phase, noise)
    audio = np.asarray(audio, dtype=np.float32)
    return [
        Inference(np.ascontiguousarray(audio[row, : n * SAMPLES_PER_FRAME]), per_item[row])
        for row, n in enumerate(frame_lengths.tolist())
    ]
