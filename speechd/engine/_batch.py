"""Batched synthesis: what a batch item is, how a batch is cut into passes, and what one
costs per item on this device (the measurement `--max-batch auto` is chosen from).

`Engine.synthesize_batch(items)` renders several chunks (of any casts, voices, speeds) in
one forward pass of the runtime: tokens padded, every time-wise statistic, recurrence and
convolution masked (`_split_batch`), each item's random inputs drawn from its own seed
exactly as alone. An item's audio does not depend on its batch-mates: made with the same
seed alone, its durations are identical, and so are its head cut and word timings but for
the two edges the signal decides (the trimmed end and the last word's end, at -60 dBFS:
within `BATCH_EDGE_SAMPLES`); its samples differ by float rounding only. Measured on the
real Kokoro-82M weights on a CPU (two mixed batches, 4 and 6 items of 5 to 210 phonemes,
six voices and a blend, speeds 0.8 to 1.4): relative RMS difference from alone 0.2-0.8% on
torch and 0.4-1.7% on ONNX Runtime, where the two runtimes alone differ from each other by
0.6-1.9% on the same chunks; hence `BATCH_TOLERANCE` (3%). The decoder's sine source turns
F0 into phase by a running sum, which amplifies rounding (torch's own float32 is 0.6% RMS
from its float64), so this is the floor, not a looseness. Padding without the masks is far
off (tests/engine/test_batch.py shows it on the short items of a batch).

Batching pays where a pass is bound by per-call overhead (a GPU's kernel launches, a
Jetson's slow host); on a CPU every item costs as much compute batched as alone, plus the
padding, and batching loses (measured on 2 cores: 1.37x per item at batch 2). So the
worker measures (`measure_batch_costs`) and keeps the largest batch that saves enough
(`choose_max_batch`); where nothing saves, it runs batch 1, which is `Engine.synthesize`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Final, NamedTuple, Protocol, TypeVar

from speechd.errors import SpeechdError
from speechd.text import Chunk

from ._voices import VoiceBook

__all__ = [
    "BATCH_EDGE_SAMPLES",
    "BATCH_TOLERANCE",
    "MAX_BATCH_TOKENS",
    "MIN_SAVING",
    "BatchItem",
    "BatchRenderer",
    "batch_passes",
    "choose_max_batch",
    "measure_batch_costs",
]

log = logging.getLogger("speechd.engine")

#: How far (relative RMS) an item's audio made in a batch may be from the same item made
#: alone with the same seed (measured: <= 0.8% torch, <= 1.7% ONNX Runtime; see above).
BATCH_TOLERANCE: Final = 0.03
#: How far (samples at 24 kHz: 1 ms) the two edges the signal decides may move: where the
#: trim ends a chunk and where its last word ends (its last sample above -60 dBFS), which a
#: rounding-sized difference can move when a sample sits at that threshold.
BATCH_EDGE_SAMPLES: Final = 24
#: The most padded tokens (items x the longest item's phonemes + 2) one pass holds: bounds
#: a pass's memory (activations grow with items x the longest). A batch over it runs in
#: several passes; 16 chunks of the planner's usual 250 phonemes still make one.
MAX_BATCH_TOKENS: Final = 16 * 256
#: The saving per item (against batch 1) a batch size must measure to be chosen.
MIN_SAVING: Final = 0.10
#: What the measurement reads (`probe_phonemes`): ~2.6 s of speech, a cast's early chunk.
PROBE_PHONEMES: Final = "ðə ˈOld mˈæn wˈɔkt slˈOli əlˈɔŋ ðə kwˈIət bˈiʧ."  # noqa: RUF001
#: Runs per batch size, at most (the fastest counts): the budget decides how many fit.
PROBE_RUNS: Final = 3
DEFAULT_BUDGET_S: Final = 6.0


class BatchItem(NamedTuple):
    """One chunk to render in a batch: `Engine.synthesize(chunk, voice, speed, seed=seed)`."""

    chunk: Chunk
    voice: str
    """A resolved voice spec (blends allowed)."""
    speed: float
    seed: int | None


class BatchRenderer(Protocol):
    """What `measure_batch_costs` renders with: an `Engine`, or a stand-in for one."""

    voices: VoiceBook

    @property
    def device(self) -> str: ...

    @property
    def max_batch(self) -> int: ...

    def prepare_batch(self, max_items: int) -> None: ...

    def synthesize(
        self, chunk: Chunk, voice: str, speed: float = 1.0, *, seed: int | None = None
    ) -> object: ...

    def synthesize_batch(self, items: Sequence[BatchItem], *, isolate: bool = True) -> object: ...


T = TypeVar("T")


def batch_passes(
    items: Sequence[tuple[int, T]], max_batch: int, max_tokens: int = MAX_BATCH_TOKENS
) -> Iterator[list[tuple[int, T]]]:
    """Cut `(tokens, item)` pairs, in order, into passes of at most `max_batch` items whose
    padded size (items x the most tokens among them) stays within `max_tokens`; an item is
    never refused (one alone may exceed `max_tokens`)."""
    current: list[tuple[int, T]] = []
    longest = 0
    for tokens, item in items:
        wider = max(longest, tokens)
        if current and (len(current) >= max_batch or wider * (len(current) + 1) > max_tokens):
            yield current
            current, wider = [], tokens
        current.append((tokens, item))
        longest = wider
    if current:
        yield current


def choose_max_batch(costs: Mapping[int, float], saving: float = MIN_SAVING) -> int:
    """The largest batch size whose cost per item is at least `saving` below batch 1's; 1
    when none is (or batch 1 was not measured). `costs`: seconds per item by batch size, as
    `measure_batch_costs` gives them."""
    base = costs.get(1)
    if base is None or not math.isfinite(base) or base <= 0:
        return 1
    fit = [n for n, cost in costs.items() if n > 1 and cost <= base * (1 - saving)]
    return max(fit, default=1)


def default_sizes(device: str) -> tuple[int, ...]:
    """1, 2, 4, 8, and 16 on CUDA."""
    return (1, 2, 4, 8, 16) if device.startswith("cuda") else (1, 2, 4, 8)


def measure_batch_costs(
    engine: BatchRenderer,
    sizes: Sequence[int] | None = None,
    budget_s: float = DEFAULT_BUDGET_S,
    *,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[int, float]:
    """Seconds per item at each batch size in `sizes` (`default_sizes`; capped at
    `engine.max_batch`; 1 always), on equal chunks (`probe_phonemes`: ~2.6 s of speech, ~8 s
    on CUDA; the engine's default voice; one seed per item), within about `budget_s` in all.

    Batches are prepared first (`Engine.prepare_batch` of the largest size: opening sessions
    is loading, not what a batch costs). One untimed run, then the sizes in increasing
    order. A size is run only when, at the cost per item last measured, it fits what is left
    of the budget; it is run again (up to PROBE_RUNS, the fastest counting) while within its
    even share of the budget. The probe is never shortened to fit: a short chunk's cost says
    little about real chunks' (on a CPU, batches of short chunks can look cheaper while real
    ones cost more), so where batch 1 alone takes so long that batch 2 does not fit (a
    compute-bound device, a CPU), the result is {1: cost}, and `auto` keeps 1. Sizes left out
    (the budget, or a batched pass that failed: logged) are absent from the result, as on a
    runtime that cannot batch. Timings are only as good as the machine is quiet.
    Synchronous: call it where the model runs (the worker's engine thread), at warm-up;
    then `Engine.prepare_batch` with the size chosen (1 lets go of what batches hold).
    """
    wanted = sorted({1, *(n for n in sizes or default_sizes(engine.device) if n >= 1)})
    wanted = [n for n in wanted if n <= max(1, engine.max_batch)]
    try:  # opening what batches need is loading, not what a batch costs: before the clock
        engine.prepare_batch(wanted[-1])
    except SpeechdError as exc:
        log.warning("batch cost: batches cannot be prepared (%s); batch 1 only", exc.message)
        wanted = [1]
    voice = engine.voices.default_voice
    chunk = Chunk(0, "batch cost probe", probe_phonemes(engine.device))
    started = clock()
    engine.synthesize(chunk, voice, 1.0, seed=0)  # untimed: first-call costs
    costs: dict[int, float] = {}
    per_item = 0.0
    for place, size in enumerate(wanted):
        if clock() - started + size * per_item > budget_s and costs:
            break
        items = [BatchItem(chunk, voice, 1.0, seed) for seed in range(size)]
        share = budget_s * (place + 1) / len(wanted)
        runs: list[float] = []
        while len(runs) < PROBE_RUNS:
            if runs and clock() - started + runs[0] > share:
                break
            began = clock()
            try:
                engine.synthesize_batch(items, isolate=False)
            except SpeechdError as exc:
                log.warning("batch cost at %d: the batched pass failed (%s)", size, exc.message)
                return costs
            runs.append(clock() - began)
        per_item = costs[size] = min(runs) / size
    log.info(
        "cost per item by batch size (%d phonemes each): %s",
        len(chunk.phonemes),
        ", ".join(f"{n}: {c * 1000:.1f} ms" for n, c in costs.items()),
    )
    return costs


def probe_phonemes(device: str) -> str:
    """What `measure_batch_costs` reads: PROBE_PHONEMES (~2.6 s of speech, a cast's early
    chunk); on CUDA, where it costs milliseconds, three times over (~8 s, a later chunk)."""
    return " ".join([PROBE_PHONEMES] * 3) if device.startswith("cuda") else PROBE_PHONEMES
