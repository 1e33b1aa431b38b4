"""Batched synthesis on the real Kokoro-82M weights (tier `model`), both runtimes: one batch of
mixed lengths, voices (a blend among them) and speeds, each item against itself made alone
with the same seed (durations and word timings identical, samples within BATCH_TOLERANCE),
and an offline recogniser reading back the batched item that carries the most padding."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from harness.speech import recall, transcribe_pcm16
from speechd.engine import SAMPLE_RATE, BatchItem, Engine, EngineConfig, Synthesis, load_engine
from speechd.text import Chunk, ChunkPolicy
from tests.support.batches import assert_as_alone
from tests.support.devices import DEVICE, RUNTIMES, skip_unless_runs

from .test_model import CANDIDATES

pytestmark = pytest.mark.model

#: One chunk per sentence (a policy that does not cut below the model's limit).
WHOLE = ChunkPolicy(
    first_tokens=400, first_max_tokens=400, sentence_tokens=400, max_tokens=400
).with_rtf(0.0)
#: Two of the candidate sentences as one: the longest item.
LONG = f"{CANDIDATES[1][:-1]} and {CANDIDATES[3][0].lower()}{CANDIDATES[3][1:]}"


@pytest.fixture(scope="module", params=RUNTIMES)
def engine(request: pytest.FixtureRequest, model_dir: Path) -> Iterator[Engine]:
    skip_unless_runs(request.param)
    yield load_engine(EngineConfig(model_dir=str(model_dir), device=DEVICE, engine=request.param))


def test_each_item_of_a_mixed_batch_is_itself_alone(engine: Engine) -> None:
    def one_chunk(text: str) -> Chunk:
        (chunk,) = engine.plan(text, "af_heart", WHOLE)
        return chunk

    items = [
        BatchItem(one_chunk("Hi there."), "bf_emma", 1.1, 11),
        BatchItem(one_chunk(CANDIDATES[0]), "am_adam", 1.0, 12),  # recognised below
        BatchItem(one_chunk(CANDIDATES[2]), "af_heart", 1.25, 13),
        BatchItem(one_chunk(LONG), "af_heart(1)+am_adam(1)", 0.8, 14),
    ]
    lengths = [len(i.chunk.phonemes) for i in items]
    assert lengths[0] * 10 < lengths[-1]
    results = engine.synthesize_batch(items)
    errors = []
    for item, got in zip(items, results, strict=True):
        alone = engine.synthesize(item.chunk, item.voice, item.speed, seed=item.seed)
        errors.append(assert_as_alone(got, alone))
    print(f"{engine.runtime}: relative RMS of each item against alone: {errors}")
    # The 15-word sentence sits beside a chunk more than twice its length: its padding is
    # longer than its speech, and an offline recogniser still reads it.
    sentence = results[1]
    assert isinstance(sentence, Synthesis)
    pcm16 = (np.clip(sentence.pcm, -1, 1) * 32767).astype("<i2").tobytes()
    heard = transcribe_pcm16(pcm16, SAMPLE_RATE)
    recalls = [recall(candidate, heard) for candidate in CANDIDATES]
    assert int(np.argmax(recalls)) == 0 and recalls[0] >= 0.7, (heard, recalls)
