"""The cast worker: job intake, fair live scheduling, crash-safe progress, supervision.

`run_worker` is the body of a worker process; `Supervisor` runs it in a spawned child and
restarts it when it dies; `Worker` is the same loop in-process, over an injected store and
engine (`Parts` says how a process builds them). The scheduling policies and their inputs
(`ActiveCast`, `Candidate`, `ChunkTimes`, `plan_timing`, `chunk_quantum`) and the start hold
of a cast that cannot be made in real time (`hold_s`, `predicted_hold_s`,
`earliest_origin`) are pure objects. The readers of worker health, voices and the line of
waiting casts, which the api uses too, are `speechd.casts`'s. Importing this package never
imports torch.

Inside: `_intake` (jobs and the cursor), `_ownership` and `_lease` (who makes a cast),
`_attempts` (opening, resuming and ending attempts; failures), `_render` (one chunk on the
engine thread), `_plan` (a cast's lazy plan and its positions), `_planning` (plans stepped
between chunk renders), `_input` (following a live cast's input), `_costs` (what chunks cost here
and what plans are made for), `_policy` and `_hold` (the scheduling decisions), `_worker`
(the loop).
"""

from __future__ import annotations

from ._config import WorkerConfig
from ._costs import (
    LONE_OVERHEAD,
    MAX_LIFT,
    SLOW_LIFT,
    ChunkTimes,
    PlanTiming,
    chunk_quantum,
    plan_timing,
)
from ._hold import earliest_origin, hold_s, predicted_hold_s
from ._lease import LEASE_SKEW_MS, lease_held
from ._policy import (
    COMFORTABLE_LEAD_S,
    QUANTUM_S,
    ActiveCast,
    Candidate,
    DeadlinePolicy,
    Decision,
    FifoPolicy,
    Idle,
    Policy,
    Run,
    Sleep,
    make_policy,
)
from ._process import EXIT_FAILED, EXIT_MODEL_UNAVAILABLE, EXIT_OK, Parts, run_worker
from ._protocols import EncoderFactory
from ._render import MAX_RECORD_S, chunk_seed, warm_up
from ._supervisor import Supervisor
from ._worker import Worker

__all__ = [
    "COMFORTABLE_LEAD_S",
    "EXIT_FAILED",
    "EXIT_MODEL_UNAVAILABLE",
    "EXIT_OK",
    "LEASE_SKEW_MS",
    "LONE_OVERHEAD",
    "MAX_LIFT",
    "MAX_RECORD_S",
    "QUANTUM_S",
    "SLOW_LIFT",
    "ActiveCast",
    "Candidate",
    "ChunkTimes",
    "DeadlinePolicy",
    "Decision",
    "EncoderFactory",
    "FifoPolicy",
    "Idle",
    "Parts",
    "PlanTiming",
    "Policy",
    "Run",
    "Sleep",
    "Supervisor",
    "Worker",
    "WorkerConfig",
    "chunk_quantum",
    "chunk_seed",
    "earliest_origin",
    "hold_s",
    "lease_held",
    "make_policy",
    "plan_timing",
    "predicted_hold_s",
    "run_worker",
    "warm_up",
]

for _name in __all__:
    _value = globals()[_name]
    if getattr(_value, "__module__", "").startswith("speechd.worker._"):
        _value.__module__ = __name__
