"""Batches that keep deadlines: which other casts' chunks ride with the most urgent one.

The engine can render several chunks in one forward pass (`Engine.synthesize_batch`); the
worker measures at warm-up what an item costs by batch size (`measure_batch_costs`) and keeps
it as `BatchCosts`. Batching is the scheduler's choice (see
docs/design/worker.md#batches-that-keep-deadlines), as BreezeRT's predictor makes it: the
policy picks the most urgent chunk exactly as with batch 1, then `fill_batch` adds other
casts' due chunks (a newcomer's first, in line order; then the listeners' next chunks,
soonest dry first; not those of a listener ahead by the comfortable lead, which the policy
would sleep for), each only while

* the batch stays within `BatchCosts.limit` items (`--max-batch`, or what `auto` chose);
* the predicted batch time (`BatchCosts.batch_s`: the measured cost per item at that size,
  times the items, times the longest item's cost alone, so padding counts) is less than the
  batch without it plus the item alone, and the batch's cost per item falls (so a long item
  does not join short ones it would pad: batch-mates stay alike);
* it takes no longer than a quantum (or the first chunk alone, when that is longer): a
  newcomer arriving meanwhile waits for the batch as it would for one chunk;
* every listener in the batch gets its chunk before it runs dry, and the device's slack
  over every chunk any listener still needs (Jackson's rule, as `_policy` reckons it) is not
  made negative, nor worse than making the first chunk alone would leave it.

A cast whose current attempt began after a failure or a death at this very chunk is made
alone (`alone`): a chunk that kills the process is then found by itself, not in company.
Where the measured costs save nothing (a CPU), `limit` is 1 and nothing here runs: the
worker is exactly the batch-1 worker. Pure, like `_policy`: no I/O.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from ._policy import ActiveCast, _chunk_jobs, _dry

__all__ = ["ALONE", "BatchCosts", "batch_limit", "fill_batch"]


@dataclass(frozen=True)
class BatchCosts:
    """Seconds per item by batch size as measured (`measure_batch_costs`), and the most
    items a batch may hold (`limit`). Sizes between two measured ones are interpolated;
    sizes past the largest measured one, or past `limit`, are never predicted."""

    per_item: Mapping[int, float] = field(default_factory=lambda: {1: 1.0})
    limit: int = 1

    def factor(self, n: int) -> float:
        """The cost per item at batch size `n`, relative to batch 1 (inf where unknown)."""
        if n <= 1:
            return 1.0
        base = self.per_item.get(1)
        sizes = sorted(s for s in self.per_item if s >= 1)
        if n > self.limit or not sizes or n > sizes[-1] or not base or base <= 0:
            return math.inf
        if n in self.per_item:
            return self.per_item[n] / base
        above = bisect.bisect_left(sizes, n)
        lo, hi = sizes[above - 1], sizes[above]
        cost = self.per_item[lo] + (self.per_item[hi] - self.per_item[lo]) * (n - lo) / (hi - lo)
        return cost / base

    def batch_s(self, gens: Sequence[float]) -> float:
        """Predicted seconds to render chunks whose costs alone are `gens`, in one batch:
        each item costs the batch's per-item rate of the longest (the rest are padded)."""
        if len(gens) <= 1:
            return sum(gens)
        return len(gens) * self.factor(len(gens)) * max(gens)

    def together(self, n: int) -> float:
        """What each of `n` alike chunks costs made in one batch against alone (1 where such a
        batch saves nothing, or holds more than `limit`: as many batches as it takes)."""
        if n <= 1 or self.limit <= 1:
            return 1.0
        factor = self.factor(min(n, self.limit))
        return min(factor, 1.0) if math.isfinite(factor) else 1.0

    @property
    def saves(self) -> bool:
        """Whether any batch size within the limit costs less per item than batch 1."""
        return any(self.factor(n) < 1.0 for n in self.per_item if 1 < n <= self.limit)


ALONE = BatchCosts()
"""Batch 1: what a worker that measured nothing (or `--max-batch 1`) runs."""


def batch_limit(costs: Mapping[int, float], max_batch: int | None, chosen: int) -> int:
    """The batch size a worker keeps: `chosen` (`choose_max_batch`'s answer) under `auto`
    (`max_batch` None); with an explicit N, the largest measured size up to N that costs less
    per item than batch 1 (1 where none does)."""
    if max_batch is None:
        return max(1, chosen)
    base = costs.get(1)
    if base is None or base <= 0:
        return 1
    saving = [n for n, cost in costs.items() if 1 < n <= max_batch and cost < base]
    if not saving:
        return 1
    return max_batch if max(costs) >= max_batch else max(saving)


def fill_batch(
    now: float,
    casts: Sequence[ActiveCast],
    first: str,
    costs: BatchCosts,
    *,
    quantum_s: float,
    comfortable_lead_s: float,
    alone: Collection[str] = (),
) -> list[str]:
    """The casts whose next chunks are made together with `first`'s (the policy's choice,
    always first): see the module docstring."""
    by_id = {c.id: c for c in casts}
    head = by_id.get(first)
    if head is None or costs.limit <= 1 or first in alone:
        return [first]
    fresh = sorted((c for c in casts if c.first_audio_s is None), key=lambda c: c.order)
    listeners = sorted(
        (c for c in casts if c.first_audio_s is not None), key=lambda c: (_dry(c), c.order)
    )
    candidates = [
        c
        for c in (*fresh, *listeners)
        if c.id != first
        and c.id not in alone
        and c.chunks
        and (c.first_audio_s is None or (c.lead(now) or 0.0) < comfortable_lead_s)
    ]
    chosen = [head]
    took = head.next_gen_s
    baseline = _slack_after(now, casts, chosen, took)
    ceiling = max(quantum_s, head.next_gen_s)
    for cast in candidates:
        if len(chosen) >= costs.limit:
            break
        trial = [*chosen, cast]
        t = costs.batch_s([c.next_gen_s for c in trial])
        if not (t < took + cast.next_gen_s and t / len(trial) < took / len(chosen)):
            continue  # it saves nothing (padding), or the cost per item no longer falls
        if t > ceiling:
            continue
        if any(c.first_audio_s is not None and (c.lead(now) or 0.0) < t for c in trial):
            continue  # a listener in the batch would run dry before it lands
        if _slack_after(now, casts, trial, t) < min(0.0, baseline):
            continue
        chosen, took = trial, t
    return [c.id for c in chosen]


def _slack_after(
    now: float, casts: Sequence[ActiveCast], batch: Sequence[ActiveCast], took: float
) -> float:
    """The device's slack once `batch` (their next chunks, `took` seconds) is made: over
    every chunk the listeners (and the batch's newcomers) still need after it, in deadline
    order, the least of its deadline minus the time it is done by."""
    members = {c.id for c in batch}
    least = math.inf
    jobs: list[tuple[float, float]] = []
    for cast in casts:
        if cast.id in members:
            if cast.first_audio_s is not None:
                due = cast.lead(now) or 0.0
                least = min(least, due - took)
            else:
                due = took  # its first audio lands with the batch
            due += cast.chunks[0][0]
            for audio, gen in cast.chunks[1:]:
                jobs.append((due, gen))
                due += audio
        elif cast.first_audio_s is not None:
            jobs.extend(_chunk_jobs(now, cast, 1.0))
    work = took
    for due, gen in sorted(jobs):
        work += gen
        least = min(least, due - work)
    return least
