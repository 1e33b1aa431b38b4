"""The runtime an engine speaks through, held or given back, and kept speaking when its device
runs out of memory: `ResidentRuntime`.

It is a `Runtime` over the real one (torch's or ONNX Runtime's), which it opens with
`open_runtime(device)`:

* `unload` drops the real runtime and gives its memory back (`release_device_memory`: the
  CUDA cache where torch ran there, the C heap everywhere); `load`, or the next `infer`,
  opens it again on the same device. The weights' files stay where they are, so a load after
  an unload reads them again (from the page cache, mostly).
* A chunk the device has no memory for (`out_of_memory`) is made again in smaller pieces: cut
  in two after a word, each half cut again while it still does not fit, down to
  `MIN_PIECE_TOKENS`; the pieces are joined where the model would have gone on (each piece's
  end and start markers cut, `_join`), so the chunk's audio and its durations read as one.
  If the pieces do not fit either, the device's cached memory is released and they are tried
  once more. If the device stays full: under `--device auto` the runtime moves to the CPU and
  says so once (`fallback`, and a warning in the log); with a device named, ModelUnavailable
  says why, and the worker reports the model unavailable (no cast is failed for it).
* `fall_back` is the same move, for a device that failed the sanity check at load (`_sanity`).

None of the CUDA paths has run on a GPU here: tests drive them on the CPU through a runtime
that says it is on `cuda:0` and raises torch's own OutOfMemoryError past a chunk size.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager
from typing import Final

import numpy as np
import numpy.typing as npt

from speechd.errors import CastFailed, ModelUnavailable

from ._heap import HeapTrimmer
from ._memory import out_of_memory, release_device_memory
from ._runtime import SAMPLES_PER_FRAME, Inference, Request, Runtime
from ._stop import Stop

__all__ = ["MIN_PIECE_TOKENS", "ResidentRuntime", "RuntimeOpener"]

log = logging.getLogger("speechd.engine")

#: No piece of a chunk retried smaller is cut shorter than this many phonemes (a clause of
#: two or three words): shorter pieces would not fit either, and speak worse.
MIN_PIECE_TOKENS: Final = 12
_FADE = 120  # samples (5 ms) faded across the join of two pieces

RuntimeOpener = Callable[[str], Runtime]
"""Opens the real runtime on a device ("auto", "cpu", "cuda", "cuda:N"); ModelUnavailable
when it cannot."""


class ResidentRuntime:
    """A `Runtime` that can give its model back and take it again, and that moves off a full
    device (see the module's docstring). Single-threaded, like every runtime."""

    def __init__(
        self,
        open_runtime: RuntimeOpener,
        runtime: Runtime,
        *,
        wanted: str,
        boundaries: Collection[int] = (),
    ) -> None:
        self._open = open_runtime
        self._current: Runtime | None = runtime
        self._wanted = wanted
        self._boundaries = frozenset(boundaries)
        self._trimmer = HeapTrimmer()
        self.name = runtime.name
        self.fingerprint = runtime.fingerprint
        self.graph: str = getattr(runtime, "graph", "")
        """The decoder the runtime speaks with (its `graph`; "" for one that does not say)."""
        self.device = runtime.device
        self.detail = runtime.detail
        self.fallback = ""
        """Why the runtime left the device it was asked for, for the CPU ("" while it has
        not): a failed sanity check, or a device that stayed full."""
        self.load_s = 0.0
        """Seconds the last `load` took (the runtime's own; the engine adds its warm-up)."""
        self._max_batch = runtime.max_batch

    @property
    def resident(self) -> bool:
        """Whether the real runtime (and its weights) is held now."""
        return self._current is not None

    @property
    def current(self) -> Runtime:
        """The real runtime, opened first if it was given back."""
        if self._current is None:
            self.load()
        assert self._current is not None
        return self._current

    def load(self) -> float:
        """Open the real runtime again on its device (nothing if it is held); the seconds it
        took."""
        if self._current is not None:
            return 0.0
        started = time.perf_counter()
        runtime = self._open(self.device)
        self._current, self.detail = runtime, runtime.detail
        self.load_s = time.perf_counter() - started
        return self.load_s

    def unload(self) -> None:
        """Drop the real runtime and give back the memory it held."""
        if self._current is None:
            return
        self._current = None
        release_device_memory(self.name, self.device, self._trimmer)

    def fall_back(self, reason: str, runtime: Runtime | None = None) -> None:
        """Leave the device for the CPU (`runtime`, when one is open there already), saying
        why once."""
        left = self.device
        self._current = None
        release_device_memory(self.name, left, self._trimmer)
        self._current = runtime if runtime is not None else self._open("cpu")
        self.device, self.detail = "cpu", self._current.detail
        self.fallback = reason
        log.warning("device auto: %s; speaking on the CPU from now on", reason)

    def release(self) -> None:
        """Give the device's cached memory back, keeping the model: torch's CUDA cache; ONNX
        Runtime's arena only goes with its sessions, so they are opened anew."""
        if self.name == "torch":
            release_device_memory(self.name, self.device, self._trimmer)
        else:
            self.unload()
            self.load()

    # ------------------------------------------------------------------ batches

    @property
    def max_batch(self) -> int:
        """The real runtime's (while it is given back: what it had)."""
        if self._current is not None:
            self._max_batch = self._current.max_batch
        return self._max_batch

    def prepare_batch(self, max_items: int) -> None:
        if self._current is not None:  # given back: a batch opens what it needs when it comes
            self._current.prepare_batch(max_items)

    def infer_batch(self, requests: Sequence[Request]) -> list[Inference]:
        """The real runtime's batched pass. Out of memory is not handled here: the engine
        makes the items again one at a time, through `infer`, which is."""
        return self.current.infer_batch(requests)

    # ------------------------------------------------------------------ synthesis

    def stoppable(self, stop: Stop) -> AbstractContextManager[None]:
        """The real runtime's (loaded first, if it was given back)."""
        return self.current.stoppable(stop)

    def infer(
        self, tokens: Sequence[int], style: npt.NDArray[np.float32], speed: float, seed: int | None
    ) -> Inference:
        try:
            return self.current.infer(tokens, style, speed, seed)
        except CastFailed as exc:
            if self.device == "cpu" or not out_of_memory(exc):
                raise
            failure: CastFailed = exc
        for released in (False, True):
            if released:
                self.release()
            log.warning(
                "%s ran out of memory on a chunk of %d phonemes: making it in smaller pieces%s",
                self.device,
                len(tokens),
                " (its cache released)" if released else "",
            )
            try:
                return self._in_pieces(tokens, style, speed, seed)
            except CastFailed as exc:
                if not out_of_memory(exc):
                    raise
                failure = exc
        reason = (
            f"{self.device} stayed out of memory for a chunk of {len(tokens)} phonemes, made in "
            f"pieces and again with its cache released ({_first_line(failure)})"
        )
        if self._wanted != "auto":
            raise ModelUnavailable(reason) from failure
        self.fall_back(reason)
        return self.current.infer(tokens, style, speed, seed)

    def _in_pieces(
        self,
        tokens: Sequence[int],
        style: npt.NDArray[np.float32],
        speed: float,
        seed: int | None,
    ) -> Inference:
        """`tokens` made in two halves (each halved again while it does not fit); whole,
        once more, when it is too short to cut."""
        if len(tokens) < 2 * MIN_PIECE_TOKENS:
            return self.current.infer(tokens, style, speed, seed)
        cut = self._cut(tokens)
        made = []
        for n, part in enumerate((tokens[:cut], tokens[cut:])):
            part_seed = None if seed is None else (seed + 1 + n) & 0xFFFF_FFFF
            try:
                made.append(self.current.infer(part, style, speed, part_seed))
            except CastFailed as exc:
                if not out_of_memory(exc) or len(part) < 2 * MIN_PIECE_TOKENS:
                    raise
                made.append(self._in_pieces(part, style, speed, part_seed))
        return _join(made[0], made[1])

    def _cut(self, tokens: Sequence[int]) -> int:
        """Where to cut `tokens` in two: just after the word boundary nearest the middle that
        leaves both halves at least `MIN_PIECE_TOKENS` long (the middle, without one)."""
        middle = len(tokens) // 2
        candidates = [
            i + 1
            for i in range(MIN_PIECE_TOKENS - 1, len(tokens) - MIN_PIECE_TOKENS)
            if tokens[i] in self._boundaries
        ]
        return min(candidates, key=lambda c: abs(c - middle)) if candidates else middle


def _first_line(exc: BaseException) -> str:
    cause = exc.__cause__ or exc
    return (str(cause).strip().splitlines() or [type(cause).__name__])[0][:200]


def _join(first: Inference, second: Inference) -> Inference:
    """Two pieces of one chunk as the model would have made it whole: the first piece's end
    marker and the second's start marker cut (their frames of silence), the cut faded over
    5 ms, the durations spliced so that they still sum to the audio. Pieces without
    durations (a foreign export) are only butted together, pauses and all."""
    a, b = first.audio, second.audio
    da, db = first.durations, second.durations
    durations: npt.NDArray[np.int64] | None = None
    if da is not None and db is not None and len(da) >= 2 and len(db) >= 2:
        a = a[: len(a) - int(da[-1]) * SAMPLES_PER_FRAME]
        b = b[int(db[0]) * SAMPLES_PER_FRAME :]
        durations = np.concatenate([da[:-1], db[1:]]).astype(np.int64)
    a, b = np.array(a, dtype=np.float32), np.array(b, dtype=np.float32)
    fade = min(_FADE, len(a), len(b))
    if fade:
        ramp = np.linspace(0.0, 1.0, fade, endpoint=False, dtype=np.float32)
        a[len(a) - fade :] *= ramp[::-1]
        b[:fade] *= ramp
    return Inference(np.concatenate([a, b]), durations)
