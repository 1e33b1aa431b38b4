"""The batched-synthesis contract, as the engine tests check it: an item made in a batch
against the same item made alone with the same seed."""

from __future__ import annotations

import numpy as np

from speechd.engine import Synthesis
from speechd.engine._batch import BATCH_EDGE_SAMPLES, BATCH_TOLERANCE

__all__ = ["assert_as_alone"]


def assert_as_alone(got: object, alone: Synthesis) -> float:
    """Durations, the head cut and every word's timing identical, but for the two edges the
    signal decides (the trimmed end and the last word's end: within BATCH_EDGE_SAMPLES);
    samples within BATCH_TOLERANCE (relative RMS over what both kept). Returns that RMS."""
    assert isinstance(got, Synthesis), got
    assert got.durations == alone.durations and got.durations
    assert (got.head, got.tokens, got.unit) == (alone.head, alone.tokens, alone.unit)
    assert abs(len(got.pcm) - len(alone.pcm)) <= BATCH_EDGE_SAMPLES
    assert len(got.words) == len(alone.words) and got.words
    assert got.words[:-1] == alone.words[:-1]
    (last, same) = got.words[-1], alone.words[-1]
    assert (last.text, last.start) == (same.text, same.start)
    assert abs(last.end - same.end) <= BATCH_EDGE_SAMPLES
    kept = min(len(got.pcm), len(alone.pcm))
    diff = got.pcm[:kept].astype(np.float64) - alone.pcm[:kept]
    rms = float(np.sqrt(np.mean(alone.pcm[:kept].astype(np.float64) ** 2)))
    error = float(np.sqrt(np.mean(diff**2))) / max(rms, 1e-12)
    assert error <= BATCH_TOLERANCE, error
    return error
