"""The sessions the ONNX Runtime runtime runs (`_onnx` opens them): speechd's export of the two
halves (`SplitGraphs`, with the batched halves where the export has them) or a foreign
single-graph export (`WholeGraph`). Imports neither torch nor onnxruntime."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from speechd.errors import ModelUnavailable

from ._runtime import SAMPLES_PER_FRAME, Inference

__all__ = ["SplitGraphs", "WholeGraph"]


class SplitGraphs:
    """speechd's export: the two halves of `_split` as two sessions, and where the export
    has them, the batched halves (`_split_batch`) as two more, opened at the first batch
    (or `prepare_batch`): a worker that never batches never holds their weights (~330 MB)."""

    def __init__(
        self,
        front: Any,
        back: Any,
        long_back: tuple[Any, int] | None = None,
        run: Any = None,
        batched: Callable[[], tuple[Any, Any]] | None = None,
        open_back: Callable[[Path], Any] | None = None,
    ) -> None:
        self._front = front
        self._back = back
        self._open_back = open_back  # None: the decoder cannot be swapped (on a GPU)
        # A CUDA-only session for chunks of more frames than TensorRT's profile holds.
        self._long_back = long_back
        self._run = run  # RunOptions, shared by every session's runs
        self._open_batched = batched  # None: the export has no batched graphs
        self._batched: tuple[Any, Any] | None = None

    @property
    def run_options(self) -> Any:
        """The RunOptions every run passes (`OnnxRuntime.stoppable` sets its `terminate`)."""
        return self._run

    @property
    def swappable(self) -> bool:
        """Whether `use_back` can put another decoder graph in place (on the CPU)."""
        return self._open_back is not None

    def use_back(self, path: Path) -> None:
        """Decode with the graph at `path` (a variant of `back.onnx`: the same inputs and
        output) from now on; the one before is let go first, so two are never held."""
        assert self._open_back is not None, "check `swappable` first"
        self._back = None
        self._back = self._open_back(path)

    @property
    def batches(self) -> bool:
        return self._open_batched is not None

    def prepare_batch(self, max_items: int) -> None:
        if self._open_batched is None:
            return
        if max_items <= 1:
            self._batched = None
        elif self._batched is None:
            self._batched = self._open_batched()

    def _sessions(self) -> tuple[Any, Any]:
        assert self._open_batched is not None, "OnnxRuntime.max_batch is 1: no batched graphs"
        if self._batched is None:
            self._batched = self._open_batched()
        return self._batched

    def front_batch(
        self,
        input_ids: npt.NDArray[np.int64],
        lengths: npt.NDArray[np.int64],
        style: npt.NDArray[np.float32],
        speed: npt.NDArray[np.float32],
    ) -> tuple[npt.NDArray[np.int64], Any]:
        feeds = {"input_ids": input_ids, "lengths": lengths, "style": style, "speed": speed}
        durations, d, t_en = self._sessions()[0].run(None, feeds, self._run)
        return durations, (d, t_en)

    def back_batch(
        self,
        state: Any,
        frames: npt.NDArray[np.int64],
        frame_lengths: npt.NDArray[np.int64],
        style: npt.NDArray[np.float32],
        phase: npt.NDArray[np.float32],
        noise: npt.NDArray[np.float32],
    ) -> npt.NDArray[np.float32]:
        d, t_en = state
        feeds = {"d": d, "t_en": t_en, "frames": frames, "frame_lengths": frame_lengths}
        feeds |= {"style": style, "phase": phase, "noise": noise}
        (audio,) = self._sessions()[1].run(None, feeds, self._run)
        return audio

    def front(
        self, input_ids: npt.NDArray[np.int64], style: npt.NDArray[np.float32], speed: float
    ) -> tuple[npt.NDArray[np.int64], Any]:
        durations, d, t_en = self._front.run(
            None,
            {"input_ids": input_ids, "style": style, "speed": np.array([speed], np.float32)},
            self._run,
        )
        return durations, (d, t_en)

    def back(
        self,
        state: Any,
        frames: npt.NDArray[np.int64],
        style: npt.NDArray[np.float32],
        phase: npt.NDArray[np.float32],
        noise: npt.NDArray[np.float32],
    ) -> npt.NDArray[np.float32]:
        d, t_en = state
        session = self._back
        if self._long_back is not None and frames.size > self._long_back[1]:
            session = self._long_back[0]
        feeds = {"d": d, "t_en": t_en, "frames": frames, "style": style}
        (audio,) = session.run(None, {**feeds, "phase": phase, "noise": noise}, self._run)
        return audio


class WholeGraph:
    """A foreign single-graph Kokoro export."""

    def __init__(self, session: Any, path: Path, run: Any = None) -> None:
        self._run = run
        self.run_options = run
        inputs = {i.name: i.type for i in session.get_inputs()}
        self._ids = next((n for n in ("input_ids", "tokens") if n in inputs), None)
        self._style = next((n for n in ("style", "ref_s") if n in inputs), None)
        if self._ids is None or self._style is None or "speed" not in inputs:
            raise ModelUnavailable(
                f"{str(path)!r} is not a Kokoro ONNX export (inputs: {', '.join(inputs)}; "
                "expected tokens or input_ids, style, speed)."
            )
        self._speed_type = np.int32 if "int32" in inputs["speed"] else np.float32
        if "int64" in inputs["speed"]:
            self._speed_type = np.int64
        outputs = session.get_outputs()
        self._with_durations = len(outputs) > 1 and "int" in outputs[1].type
        self._session = session

    def infer(
        self, tokens: Sequence[int], style: npt.NDArray[np.float32], speed: float
    ) -> Inference:
        feeds = {
            self._ids: np.array([[0, *tokens, 0]], dtype=np.int64),
            self._style: style,
            "speed": np.array([speed], dtype=self._speed_type),
        }
        outputs = self._session.run(None, feeds, self._run)
        audio = np.ascontiguousarray(outputs[0], dtype=np.float32).reshape(-1)
        durations = None
        if self._with_durations:
            durations = np.asarray(outputs[1], dtype=np.int64).reshape(-1)
            if int(durations.sum()) * SAMPLES_PER_FRAME != audio.size:
                durations = None  # not the frame layout the engine knows
        return Inference(audio, durations)
