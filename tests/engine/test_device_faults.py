"""A device that runs out of memory, one that times speech wrongly, and a memory budget, on
this CPU-only machine: a FakeCuda runtime (tests.support.devices) stands for the CUDA device,
a real runtime underneath, and the engine's own paths do the rest (the retry in pieces, the
release, the fallback, the sanity check, the planning within a budget). torch.cuda itself is
never called here: those calls are untested on a device."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from speechd.engine import Engine, EngineConfig, load_engine
from speechd.engine._memory import MemoryBudget, out_of_memory, parse_size
from speechd.engine._resident import MIN_PIECE_TOKENS, _join
from speechd.engine._runtime import SAMPLES_PER_FRAME, Inference
from speechd.errors import CastFailed, ModelUnavailable
from speechd.text import Chunk, ChunkPolicy
from tests.support.devices import FakeCudaOpener

LONG = (
    "When the graphics card runs out of memory in the middle of a long sentence, the chunk "
    "is made again in smaller pieces, and the listener never hears the seam between them."
)


def _engine(model_dir: Path, device: str = "cuda", **fake: object) -> tuple[Engine, FakeCudaOpener]:
    opener = FakeCudaOpener(str(model_dir), **fake)  # type: ignore[arg-type]
    engine = load_engine(
        EngineConfig(model_dir=str(model_dir), device=device, engine="torch"), open_runtime=opener
    )
    return engine, opener


@pytest.fixture(scope="module")
def named(tiny_model_dir: Path) -> tuple[Engine, FakeCudaOpener]:
    """The tiny model on a FakeCuda device named `cuda` (it stays there: tests that make it
    run out of memory put it back as it was)."""
    return _engine(tiny_model_dir)


@pytest.fixture
def on_device(named: tuple[Engine, FakeCudaOpener]) -> Iterator[tuple[Engine, FakeCudaOpener]]:
    engine, opener = named
    yield engine, opener
    device = opener.device
    device.fits, device.full = 10_000, False
    device.calls.clear()
    device.failed.clear()


def _long_chunk(engine: Engine) -> Chunk:
    chunks = engine.plan(LONG, "af_heart", ChunkPolicy(first_max_tokens=200, first_tokens=200))
    chunk = max(chunks, key=lambda c: len(c.phonemes))
    assert len(chunk.phonemes) > 4 * MIN_PIECE_TOKENS
    return chunk


def test_a_chunk_the_device_has_no_memory_for_is_made_in_pieces_joined_as_one(
    on_device: tuple[Engine, FakeCudaOpener],
) -> None:
    engine, opener = on_device
    assert engine.device == "cuda:0" and engine.sanity is not None
    chunk = _long_chunk(engine)
    device = opener.device
    device.fits = 2 * MIN_PIECE_TOKENS + 10
    device.calls.clear()
    made = engine.synthesize(chunk, "af_heart", 1.0, seed=3)
    tokens = len(made.tokens)
    assert device.failed[0] == tokens  # tried whole first
    pieces = [n for n in device.calls if n <= device.fits]
    assert sum(pieces) == tokens and all(n >= MIN_PIECE_TOKENS for n in pieces)
    # One utterance: one start and one end marker, durations that add up to the audio.
    assert len(made.durations) == tokens + 2
    assert len(made.pcm) > 0 and np.isfinite(made.pcm).all()
    assert [w.start for w in made.words] == sorted(w.start for w in made.words)
    assert engine.device == "cuda:0" and engine.fallback == ""


def test_the_same_seed_and_split_give_the_same_audio(
    on_device: tuple[Engine, FakeCudaOpener],
) -> None:
    engine, opener = on_device
    opener.device.fits = 2 * MIN_PIECE_TOKENS + 10
    chunk = _long_chunk(engine)
    one = engine.synthesize(chunk, "af_heart", 1.0, seed=3).pcm
    two = engine.synthesize(chunk, "af_heart", 1.0, seed=3).pcm
    np.testing.assert_array_equal(one, two)


def test_pieces_join_without_their_inner_markers() -> None:
    first = Inference(np.ones(5 * SAMPLES_PER_FRAME, np.float32), np.array([1, 2, 1, 1]))
    second = Inference(np.full(6 * SAMPLES_PER_FRAME, 2, np.float32), np.array([2, 3, 1]))
    joined = _join(first, second)
    assert joined.durations is not None
    assert joined.durations.tolist() == [1, 2, 1, 3, 1]
    assert int(joined.durations.sum()) * SAMPLES_PER_FRAME == joined.audio.size
    middle = 4 * SAMPLES_PER_FRAME
    assert joined.audio[middle - 1] < 0.1 and joined.audio[middle] == 0.0  # faded across
    assert joined.audio[middle - 200] == 1.0 and joined.audio[middle + 200] == 2.0


def test_a_device_that_stays_full_under_auto_moves_to_the_cpu_and_says_so_once(
    tiny_model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="speechd.engine")
    engine, opener = _engine(tiny_model_dir, device="auto")
    opens = len(opener.opened)
    opener.device.full = True
    chunk = _long_chunk(engine)
    made = engine.synthesize(chunk, "af_heart", 1.0, seed=1)
    assert made.pcm.size > 0
    assert engine.device == "cpu"
    assert "stayed out of memory" in engine.fallback
    assert len(opener.opened) == opens + 1  # the cache released: its sessions opened anew
    engine.synthesize(chunk, "af_heart", 1.0, seed=2)
    said = [r for r in caplog.records if "speaking on the CPU from now on" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING


def test_a_named_device_that_stays_full_is_model_unavailable(
    on_device: tuple[Engine, FakeCudaOpener],
) -> None:
    engine, opener = on_device
    opener.device.full = True
    with pytest.raises(ModelUnavailable, match=r"cuda:0 stayed out of memory .*CUDA out of memory"):
        engine.synthesize(_long_chunk(engine), "af_heart", 1.0, seed=1)
    assert engine.device == "cuda:0"


def test_a_device_that_times_speech_wrongly_is_refused_with_its_reason(
    tiny_model_dir: Path,
) -> None:
    with pytest.raises(ModelUnavailable) as refused:
        _engine(tiny_model_dir, device="cuda", timing=0.73)
    message = refused.value.message
    assert "cuda:0 predicts durations" in message and "shorter than the CPU" in message
    assert "\n" not in message


def test_under_auto_a_device_that_times_speech_wrongly_leaves_for_the_cpu(
    tiny_model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="speechd.engine")
    engine, opener = _engine(tiny_model_dir, device="auto", timing=0.73)
    assert engine.device == "cpu" and "shorter than the CPU" in engine.fallback
    report = engine.sanity
    assert report is not None and report.duration_ratio < 0.9
    assert opener.cpu_opens == 1  # the reference it was checked against speaks now
    assert "speaking on the CPU from now on" in caplog.text
    engine.synthesize(engine.plan("Fine on the CPU.", "af_heart")[0], "af_heart", 1.0)


def test_a_device_that_speaks_as_the_cpu_passes_with_its_figures(
    on_device: tuple[Engine, FakeCudaOpener],
) -> None:
    engine, _ = on_device
    report = engine.sanity
    assert report.problem is None and report.duration_ratio == 1.0
    assert report.spectrum_db < 0.01 and "durations" in report.describe()


def test_a_budget_caps_every_chunk_at_any_speed(tiny_engine: Engine) -> None:
    weights = 300 << 20
    limit = weights + (400 << 20)
    budget = MemoryBudget.plan(limit, weights=weights, runtime="torch", device="cpu")
    assert budget.chunk_s == pytest.approx(4.0)
    saved, tiny_engine.memory = tiny_engine.memory, budget
    try:
        chunks = tiny_engine.plan(LONG * 4, "af_heart")
        assert max(len(c.phonemes) for c in chunks) <= ChunkPolicy().tokens(4.0)
        slower = ChunkPolicy().with_speed(0.5)
        slow = tiny_engine.plan(LONG, "af_heart", slower)
        assert max(len(c.phonemes) for c in slow) <= slower.tokens(4.0)
        # The worker's policies are this one timed anew: the cap stays.
        timed = ChunkPolicy().with_memory(4.0).with_rtf(0.5, max_chunk_s=10.0)
        assert timed.memory_chunk_s == 4.0
        assert ChunkPolicy().with_memory(2.0).with_memory(4.0).memory_chunk_s == 2.0
    finally:
        tiny_engine.memory = saved


def test_a_budget_too_small_for_the_model_says_what_it_needs(tiny_model_dir: Path) -> None:
    weights = (tiny_model_dir / "kokoro-v1_0.pth").stat().st_size
    with pytest.raises(ModelUnavailable) as refused:
        load_engine(
            EngineConfig(
                model_dir=str(tiny_model_dir),
                device="cpu",
                engine="torch",
                max_device_memory=weights,
            )
        )
    assert "--max-device-memory 224 MiB is too little for the model on cpu" in refused.value.message
    assert "at least" in refused.value.message


@pytest.mark.parametrize(
    ("given", "size"),
    [("512M", 512 << 20), ("1.5G", int(1.5 * (1 << 30))), ("2GiB", 2 << 30), ("2gb", 2 << 30),
     ("1073741824", 1 << 30), (4096, 4096), ("64 k", 64 << 10)],
)  # fmt: skip
def test_sizes_parse_in_binary_units(given: str | int, size: int) -> None:
    assert parse_size(given) == size


@pytest.mark.parametrize("bad", ["", "lots", "0", "-1G", "1.2.3G", "12Q", "9" * 40, 0])
def test_anything_else_is_not_a_size(bad: str | int) -> None:
    with pytest.raises(ValueError, match="is not a size"):
        parse_size(bad)


def test_out_of_memory_is_told_from_other_failures() -> None:
    import torch

    def wrapped(cause: BaseException) -> CastFailed:
        try:
            raise cause
        except BaseException as exc:
            try:
                raise CastFailed("Synthesis failed on cuda:0") from exc
            except CastFailed as failed:
                return failed

    assert out_of_memory(wrapped(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate")))
    arena = (
        "[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code returned while "
        "running Conv node. onnxruntime::BFCArena::AllocateRawInternal Failed to allocate "
        "memory for requested buffer of size 939524096"
    )
    assert out_of_memory(wrapped(RuntimeError(arena)))
    assert out_of_memory(wrapped(RuntimeError("CUDA failure 2: out of memory ; GPU=0")))
    assert not out_of_memory(wrapped(RuntimeError("shape mismatch in Conv node")))
    assert not out_of_memory(wrapped(RuntimeError("DefaultCPUAllocator: not enough memory")))
