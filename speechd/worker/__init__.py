"""The cast worker: job intake, fair live scheduling, crash-safe progress, supervision.

`run_worker` is the body of a worker process, run as its `WorkerConfig` says; `Supervisor`
runs it in a spawned child and restarts it when it dies; `Worker` is the same loop
in-process, over an injected store and engine (`Parts` says how a process builds them).
`ChunkTimes`, `plan_timing`, `warm_up`, `QUANTUM_S` and `chunk_seed` are how the worker
measures the device, times a cast's plan and seeds its chunks, for the load tests' raw loop
to do as the worker does. The readers of worker health, voices and the line of waiting
casts, which the api uses too, are `speechd.casts`'s. Importing this package never imports
torch.

Inside: `_intake` (jobs and the cursor), `_ownership` (who makes a cast: leases),
`_attempts` and `_continuation` (opening, resuming and ending attempts; failures; landing a
step's records), `_endings` (how a cast ends in the store), `_render` (one chunk on the engine
thread), `_plan` (a cast's lazy plan and its positions), `_planning` (plans stepped between
chunk renders), `_input` (following a live cast's input), `_costs` (what chunks cost here and
what plans are made for), `_policy` and `_hold` (the scheduling decisions, pure), `_admission`
(who is let in, and the quantum), `_cast` (an admitted cast, the one writer of its progress,
and the active casts the loop owns), `_update` (what a step's chunks do to their casts, as
data, pure), `_worker` (the loop).
Tests that need a private part import its module (`speechd.worker._policy`).
"""

from __future__ import annotations

from ._config import WorkerConfig
from ._costs import ChunkTimes, plan_timing
from ._policy import QUANTUM_S
from ._process import Parts, run_worker
from ._render import chunk_seed, warm_up
from ._supervisor import Supervisor
from ._worker import Worker

__all__ = [
    "QUANTUM_S",
    "ChunkTimes",
    "Parts",
    "Supervisor",
    "Worker",
    "WorkerConfig",
    "chunk_seed",
    "plan_timing",
    "run_worker",
    "warm_up",
]

for _name in __all__:
    _value = globals()[_name]
    if getattr(_value, "__module__", "").startswith("speechd.worker._"):
        _value.__module__ = __name__
