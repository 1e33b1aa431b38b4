"""Batched synthesis on the tiny random-weight model, both runtimes: every item of a batch is
itself alone (durations, word timings, samples), a failure stays with its item, exports
without batched graphs run one chunk at a time; and the batch cost measurement and the
choice of `--max-batch auto` on simulated devices."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from speechd.engine import (
    DEFAULT_VOICE_MAP,
    BatchItem,
    Engine,
    EngineConfig,
    Synthesis,
    VoiceBook,
    _batch,
    choose_max_batch,
    load_engine,
    measure_batch_costs,
)
from speechd.engine._batch import BATCH_TOLERANCE, PROBE_PHONEMES, batch_passes, probe_phonemes
from speechd.engine._export import BACK_BATCH, FRONT_BATCH, MANIFEST
from speechd.engine._files import open_model_folder
from speechd.engine._packs import read_pack
from speechd.engine._runtime import Request, infer_batch_in_two_stages
from speechd.engine._torch import TorchRuntime, load_torch_runtime
from speechd.errors import CastFailed, InvalidRequest, SpeechdError, UnknownVoice
from speechd.text import Chunk, ChunkPolicy
from tests.support.tiny_model import export_tiny


@pytest.fixture(scope="module")
def tiny_torch(tiny_model_dir: Path) -> TorchRuntime:
    """The tiny model's torch runtime, on its own."""
    return load_torch_runtime(open_model_folder(tiny_model_dir), "cpu", None)


def engine_over(runtime: Any, model_dir: Path) -> Engine:
    """An engine over `runtime`, as `load_engine` builds one."""
    folder = open_model_folder(model_dir)
    voices = VoiceBook(folder.voices, voice_map=DEFAULT_VOICE_MAP, default_voice="af_heart")
    return Engine(runtime, folder, voices, json.loads(folder.config.read_text())["vocab"])


def request_for(model_dir: Path, item: BatchItem) -> Request:
    """What a runtime is asked for `item`'s chunk (read by af_heart)."""
    folder = open_model_folder(model_dir)
    vocab = json.loads(folder.config.read_text())["vocab"]
    phonemes = item.chunk.phonemes
    style = read_pack(folder.voice_path("af_heart"))[len(phonemes) - 1].reshape(1, -1)
    return Request([vocab[p] for p in phonemes if p in vocab], style, item.speed, item.seed)

TEXT = (
    "Hi. The old man walked slowly along the quiet beach, and the sun went down over the "
    "water while the gulls called."
)


def relative_rms(got: npt.NDArray[np.float32], expected: npt.NDArray[np.float32]) -> float:
    assert got.shape == expected.shape
    diff = np.asarray(got, np.float64) - np.asarray(expected, np.float64)
    rms = float(np.sqrt(np.mean(np.asarray(expected, np.float64) ** 2)))
    return float(np.sqrt(np.mean(diff**2))) / max(rms, 1e-12)


def mixed_batch(engine: Engine) -> list[BatchItem]:
    """Chunks of other lengths, voices (a blend among them) and speeds, each its own seed."""
    tiny = ChunkPolicy(first_tokens=8, first_max_tokens=8, floor_tokens=8, min_tokens=8)
    whole = ChunkPolicy(first_tokens=250, first_max_tokens=250)
    chunks = [
        engine.plan(TEXT, "af_heart", tiny)[0],  # "Hi."
        *engine.plan(TEXT, "af_heart")[1:3],
        engine.plan(TEXT, "af_heart", whole)[-1],
    ]
    voices = ["af_heart", "af_bella(2)+af_sky(1)", "am_adam", "bf_emma"]
    speeds = [1.0, 1.3, 0.8, 1.1]
    lengths = sorted({len(c.phonemes) for c in chunks})
    assert len(lengths) >= 3 and lengths[-1] >= 3 * lengths[0]  # padding that matters
    return [
        BatchItem(chunk, voices[i % len(voices)], speeds[i % len(speeds)], 100 + i)
        for i, chunk in enumerate(chunks)
    ]


def assert_alone(engine: Engine, item: BatchItem, got: Synthesis | SpeechdError) -> float:
    """`got` is `item` made alone, up to rounding; returns the samples' difference."""
    assert isinstance(got, Synthesis), got
    alone = engine.synthesize(item.chunk, item.voice, item.speed, seed=item.seed)
    assert got.durations == alone.durations and got.durations
    assert got.words == alone.words and got.words
    assert (got.head, got.tokens, got.unit) == (alone.head, alone.tokens, alone.unit)
    error = relative_rms(got.pcm, alone.pcm)
    assert error <= BATCH_TOLERANCE
    return error


def test_each_item_of_a_batch_is_itself_alone(engine: Engine) -> None:
    assert engine.max_batch > 1
    items = mixed_batch(engine)
    results = engine.synthesize_batch(items)
    assert len(results) == len(items)
    errors = [assert_alone(engine, item, got) for item, got in zip(items, results, strict=True)]
    # The tiny model's voice is unvoiced noise: no sine phase to amplify rounding, so an
    # item's samples are its own to float precision (the real weights: test_batch_model).
    assert max(errors) < 1e-4


def test_without_masks_a_short_item_takes_in_its_neighbours_padding(
    tiny_engine: Engine, tiny_torch: TorchRuntime, tiny_model_dir: Path
) -> None:
    """What the test above guards against: the same batch with every row's frame length
    stretched to the longest (statistics and convolutions then run over the padding, as in
    a naively padded batch) is far off for its shorter items."""

    class Unmasked:
        def front_batch(self, *args: Any) -> Any:
            return tiny_torch.front_batch(*args)

        def back_batch(self, state: Any, frames: Any, lengths: Any, *rest: Any) -> Any:
            stretched = np.full_like(lengths, frames.shape[1])
            return tiny_torch.back_batch(state, frames, stretched, *rest)

    import torch

    requests = [request_for(tiny_model_dir, item) for item in mixed_batch(tiny_engine)]
    with torch.inference_mode():
        naive = infer_batch_in_two_stages(Unmasked(), requests)
    masked = tiny_torch.infer_batch(requests)
    shortest = min(range(len(requests)), key=lambda i: len(requests[i].tokens))
    alone = tiny_torch.infer(*requests[shortest])
    assert relative_rms(masked[shortest].audio, alone.audio) < 1e-4
    assert relative_rms(naive[shortest].audio, alone.audio) > 10 * BATCH_TOLERANCE


def test_a_batch_of_one_is_synthesize(engine: Engine) -> None:
    chunk = engine.plan(TEXT, "af_heart")[1]
    (got,) = engine.synthesize_batch([BatchItem(chunk, "am_adam", 1.2, 7)])
    alone = engine.synthesize(chunk, "am_adam", 1.2, seed=7)
    assert isinstance(got, Synthesis)
    assert got.pcm.tobytes() == alone.pcm.tobytes() and got.words == alone.words


def test_a_refused_item_gets_its_own_error_and_the_others_their_audio(engine: Engine) -> None:
    good = mixed_batch(engine)[:2]
    chunk = good[0].chunk
    items = [
        good[0],
        BatchItem(chunk, "no_such_voice", 1.0, 1),
        BatchItem(chunk, "af_heart", 9.0, 2),
        BatchItem(Chunk(0, "", ""), "af_heart", 1.0, 3),
        good[1],
    ]
    results = engine.synthesize_batch(items)
    assert isinstance(results[1], UnknownVoice)
    assert isinstance(results[2], InvalidRequest) and results[2].param == "speed"
    assert isinstance(results[3], InvalidRequest) and results[3].param == "input"
    assert_alone(engine, items[0], results[0])
    assert_alone(engine, items[4], results[4])


class Faulty:
    """The tiny torch runtime, but its batched pass fails (as out of memory would) and its
    single pass fails for one seed."""

    def __init__(self, runtime: TorchRuntime, bad_seed: int | None) -> None:
        self._runtime = runtime
        self.name, self.device, self.detail = runtime.name, runtime.device, runtime.detail
        self.fingerprint, self.max_batch = runtime.fingerprint, runtime.max_batch
        self.bad_seed = bad_seed
        self.calls: list[str] = []

    def infer_batch(self, requests: Sequence[Request]) -> Any:
        self.calls.append(f"batch of {len(requests)}")
        raise CastFailed("CUDA out of memory (simulated)")

    def infer(self, tokens: Any, style: Any, speed: float, seed: int | None) -> Any:
        self.calls.append(f"alone {seed}")
        if seed == self.bad_seed:
            raise RuntimeError("this chunk breaks the model (simulated)")
        return self._runtime.infer(tokens, style, speed, seed)


def test_when_the_batched_pass_fails_only_the_failing_item_fails(
    tiny_engine: Engine, tiny_torch: TorchRuntime, tiny_model_dir: Path
) -> None:
    items = mixed_batch(tiny_engine)
    faulty = Faulty(tiny_torch, bad_seed=items[1].seed)
    engine = engine_over(faulty, tiny_model_dir)
    results = engine.synthesize_batch(items)
    assert faulty.calls == [f"batch of {len(items)}", *(f"alone {i.seed}" for i in items)]
    assert isinstance(results[1], CastFailed) and "breaks the model" in results[1].message
    for place in (0, 2, 3):
        item = items[place]
        alone = tiny_engine.synthesize(item.chunk, item.voice, item.speed, seed=item.seed)
        got = results[place]
        assert isinstance(got, Synthesis) and got.pcm.tobytes() == alone.pcm.tobytes()
    with pytest.raises(CastFailed, match="out of memory"):  # measuring: no quiet fallback
        engine.synthesize_batch(items, isolate=False)


def test_a_batch_over_the_token_bound_runs_in_passes_with_the_same_results(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    items = mixed_batch(engine)
    whole = engine.synthesize_batch(items)
    monkeypatch.setattr(engine, "max_batch_tokens", 2 * max(len(i.chunk.phonemes) for i in items))
    split = engine.synthesize_batch(items)
    for a, b in zip(whole, split, strict=True):
        assert isinstance(a, Synthesis) and isinstance(b, Synthesis)
        assert a.durations == b.durations and relative_rms(a.pcm, b.pcm) < 1e-4


def test_batch_passes_keep_order_and_bounds() -> None:
    pairs = [(10, "a"), (12, "b"), (40, "c"), (5, "d"), (5, "e"), (200, "f")]
    passes = [[x for _, x in p] for p in batch_passes(pairs, max_batch=3, max_tokens=100)]
    # c beside a and b would pad to 3 x 40 = 120 > 100; d fits beside c (2 x 40), e does
    # not; f (200) goes alone, over the bound.
    assert passes == [["a", "b"], ["c", "d"], ["e"], ["f"]]
    assert [[x for _, x in p] for p in batch_passes(pairs, max_batch=1)] == [[x] for _, x in pairs]
    assert list(batch_passes([], max_batch=4)) == []


# ------------------------------------------------------------------ exports without batches


def test_an_export_without_batched_graphs_runs_one_chunk_at_a_time(
    tiny_model_dir: Path, tiny_onnx_engine: Engine, tmp_path: Path
) -> None:
    """An export made before batching (given with --onnx-model) has no batched graphs and
    says so in no manifest: it still runs, every item alone, as `synthesize` does."""
    older = tmp_path / "older-export"
    shutil.copytree(export_tiny(tiny_model_dir), older)
    for name in (FRONT_BATCH, BACK_BATCH):
        (older / name).unlink()
    manifest = json.loads((older / MANIFEST).read_text())
    del manifest["batch"]
    manifest["format"] = 1
    (older / MANIFEST).write_text(json.dumps(manifest))
    engine = load_engine(
        EngineConfig(model_dir=str(tiny_model_dir), engine="onnx", onnx_model=str(older))
    )
    assert engine.max_batch == 1
    items = mixed_batch(engine)[:3]
    for item, got in zip(items, engine.synthesize_batch(items), strict=True):
        alone = tiny_onnx_engine.synthesize(item.chunk, item.voice, item.speed, seed=item.seed)
        assert isinstance(got, Synthesis) and got.pcm.tobytes() == alone.pcm.tobytes()
    assert measure_batch_costs(engine, budget_s=0.0).keys() == {1}


def test_batched_graph_files_an_older_manifest_does_not_name_are_not_used(
    tiny_model_dir: Path, tiny_onnx_engine: Engine, tmp_path: Path
) -> None:
    older = tmp_path / "older-export"
    shutil.copytree(export_tiny(tiny_model_dir), older)
    manifest = json.loads((older / MANIFEST).read_text())
    del manifest["batch"]
    (older / MANIFEST).write_text(json.dumps(manifest))
    engine = load_engine(
        EngineConfig(model_dir=str(tiny_model_dir), engine="onnx", onnx_model=str(older))
    )
    assert engine.max_batch == 1


# ------------------------------------------------------------------ the cost per batch size


def test_choose_max_batch_keeps_the_largest_size_saving_a_tenth_per_item() -> None:
    cpu = {1: 1.0, 2: 1.37, 4: 1.33, 8: 1.71}  # issue 31's 2-core figures
    assert choose_max_batch(cpu) == 1
    gpu = {1: 1.0, 2: 0.55, 4: 0.3, 8: 0.18, 16: 0.17}
    assert choose_max_batch(gpu) == 16
    assert choose_max_batch({1: 1.0, 2: 0.85, 4: 0.95, 8: 0.91}) == 2  # 4 and 8 save < 10%
    assert choose_max_batch({1: 1.0, 2: 0.9}) == 2  # exactly 10%
    assert choose_max_batch({1: 1.0, 2: 0.5}, saving=0.6) == 1
    assert choose_max_batch({}) == 1
    assert choose_max_batch({2: 0.1, 4: 0.05}) == 1  # no batch-1 baseline: no claim
    assert choose_max_batch({1: 0.0, 2: 0.0}) == 1


class _Voices:
    default_voice = "af_heart"


@dataclass
class SimulatedDevice:
    """An engine on a simulated clock: a pass of `n` chunks of `tokens` phonemes takes
    `overhead + n * per_token * tokens * growth(n)` seconds (a GPU: large overhead, growth
    below 1; a CPU: no overhead, growth above 1)."""

    overhead: float
    per_token: float
    growth: Callable[[int], float]
    device: str = "cpu"
    max_batch: int = 16
    now: float = 0.0
    passes: list[tuple[int, int]] = field(default_factory=list)
    voices: _Voices = field(default_factory=_Voices)

    def clock(self) -> float:
        return self.now

    prepared: int = 0

    def prepare_batch(self, max_items: int) -> None:
        self.prepared = max_items

    def _pass(self, n: int, tokens: int) -> None:
        self.passes.append((n, tokens))
        self.now += self.overhead + n * self.per_token * tokens * self.growth(n)

    def synthesize(self, chunk: Chunk, voice: str, speed: float, *, seed: int) -> None:
        self._pass(1, len(chunk.phonemes))

    def synthesize_batch(self, items: Sequence[BatchItem], *, isolate: bool = True) -> list[Any]:
        assert not isolate  # the measurement must never time items run alone
        assert len({len(i.chunk.phonemes) for i in items}) == 1  # equal chunks
        self._pass(len(items), len(items[0].chunk.phonemes))
        return [None] * len(items)


def measure(device: SimulatedDevice, **kwargs: Any) -> dict[int, float]:
    return measure_batch_costs(device, clock=device.clock, **kwargs)  # type: ignore[arg-type]


def test_a_gpu_measures_every_size_to_16_and_batches() -> None:
    gpu = SimulatedDevice(overhead=0.02, per_token=2e-5, growth=lambda n: 0.5, device="cuda:0")
    costs = measure(gpu, budget_s=3.0)
    assert sorted(costs) == [1, 2, 4, 8, 16] and gpu.prepared == 16
    assert {t for _, t in gpu.passes} == {len(probe_phonemes("cuda:0"))}  # ~8 s of speech
    assert costs[16] < costs[1] and choose_max_batch(costs) == 16
    assert gpu.now <= 3.0


def test_a_cpu_measures_the_loss_and_keeps_1() -> None:
    """2 cores, quiet: ~1.3 s for the probe alone, batches lose 37% per item: a 6 s budget
    covers batch 1 and 2 of the whole probe, and settles on 1."""
    cpu = SimulatedDevice(overhead=0.0, per_token=0.028, growth=lambda n: 1.0 if n == 1 else 1.37)
    costs = measure(cpu, budget_s=6.0)
    assert costs.keys() == {1, 2} and costs[2] > costs[1]
    assert {t for _, t in cpu.passes} == {len(PROBE_PHONEMES)}  # never shortened
    assert choose_max_batch(costs) == 1
    # A size starts when it would fit at the cost per item measured so far; its own loss
    # may overrun the budget by that much (here 37% of batch 2's predicted 2.6 s).
    assert cpu.now <= 6.0 + 0.37 * 2 * 0.028 * len(PROBE_PHONEMES) + 1e-9


def test_a_device_too_slow_for_batch_2_in_the_budget_keeps_1_unmeasured() -> None:
    """Batch 1 of the probe alone takes most of the budget: the device is compute-bound,
    and a shorter probe would only measure the wrong thing (short chunks batch better)."""
    slow = SimulatedDevice(overhead=0.0, per_token=0.06, growth=lambda n: 0.8)
    costs = measure(slow, budget_s=6.0)
    assert costs.keys() == {1} and choose_max_batch(costs) == 1
    assert {t for _, t in slow.passes} == {len(PROBE_PHONEMES)}


def test_a_budget_of_nothing_still_measures_batch_1_and_sizes_stop_at_max_batch() -> None:
    gpu = SimulatedDevice(overhead=0.02, per_token=2e-5, growth=lambda n: 0.5, device="cuda")
    assert measure(gpu, budget_s=0.0).keys() == {1}
    capped = SimulatedDevice(0.02, 2e-5, lambda n: 0.5, device="cuda", max_batch=4)
    assert measure(capped, sizes=(1, 2, 4, 8, 32), budget_s=10.0).keys() == {1, 2, 4}


def test_a_failing_batch_size_ends_the_measurement_with_the_sizes_before_it() -> None:
    class OutOfMemoryAt8(SimulatedDevice):
        def synthesize_batch(self, items: Sequence[BatchItem], *, isolate: bool = True) -> Any:
            if len(items) >= 8:
                raise CastFailed("CUDA out of memory (simulated)")
            return super().synthesize_batch(items, isolate=isolate)

    gpu = OutOfMemoryAt8(overhead=0.02, per_token=2e-5, growth=lambda n: 0.5, device="cuda")
    assert measure(gpu, budget_s=5.0).keys() == {1, 2, 4}


def test_the_real_engine_measures_batch_costs(
    tiny_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_batch, "PROBE_RUNS", 1)  # one run a size: the unit tier stays fast
    costs = measure_batch_costs(tiny_engine, sizes=(1, 2), budget_s=600.0)
    assert costs.keys() == {1, 2} and all(c > 0 for c in costs.values())


def test_onnx_opens_its_batched_graphs_only_for_batches(
    tiny_model_dir: Path, tiny_onnx_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that never batches never holds the batched graphs' copy of the weights."""
    import onnxruntime

    opened: list[str] = []

    class Counted(onnxruntime.InferenceSession):  # type: ignore[misc]
        def __init__(self, path: str, *args: Any, **kwargs: Any) -> None:
            opened.append(Path(path).name)
            super().__init__(path, *args, **kwargs)

    monkeypatch.setattr(onnxruntime, "InferenceSession", Counted)
    engine = load_engine(EngineConfig(model_dir=str(tiny_model_dir), engine="onnx"))
    items = mixed_batch(engine)[:2]
    engine.synthesize(items[0].chunk, items[0].voice, items[0].speed, seed=items[0].seed)
    assert opened == ["front.onnx", "back.onnx"]
    first = engine.synthesize_batch(items)  # the first batch opens them
    assert opened[2:] == ["front_batch.onnx", "back_batch.onnx"]
    engine.prepare_batch(1)  # let go; a batch after that opens them again
    again = engine.synthesize_batch(items)
    assert opened[4:] == ["front_batch.onnx", "back_batch.onnx"]
    engine.prepare_batch(4)
    assert len(opened) == 6
    for a, b in zip(first, again, strict=True):
        assert isinstance(a, Synthesis) and isinstance(b, Synthesis)
        assert a.pcm.tobytes() == b.pcm.tobytes()
