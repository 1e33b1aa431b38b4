"""The cast worker: job intake, fair live scheduling, crash-safe progress, supervision.

`run_worker` is the body of a worker process; `Supervisor` runs it in a spawned child and
restarts it when it dies; `Worker` is the same loop in-process, over an injected store and
engine. `ready_workers`, `queue_position` and `queue_depth` read worker health and the line of
waiting casts from the store alone. Importing this package never imports torch.
"""

from __future__ import annotations

from ._config import WorkerConfig, default_worker_id
from ._health import FRESH_HEARTBEATS, ready_workers, worker_alive
from ._lease import LEASE_SKEW_MS, lease_held
from ._policy import (
    COMFORTABLE_LEAD_S,
    QUANTUM_S,
    Candidate,
    CastView,
    ChunkTimes,
    DeadlinePolicy,
    Decision,
    FifoPolicy,
    Idle,
    PlanTiming,
    Policy,
    Run,
    Sleep,
    make_policy,
    plan_timing,
)
from ._process import EXIT_FAILED, EXIT_MODEL_UNAVAILABLE, EXIT_OK, Parts, run_worker
from ._protocols import (
    ChunkLike,
    ChunkPolicyLike,
    EncoderFactory,
    EncoderLike,
    EngineLike,
    SynthesisLike,
    VoicesLike,
)
from ._queue import committed_offset, queue_depth, queue_position
from ._supervisor import Supervisor, describe_exit
from ._watermark import Watermark
from ._worker import MAX_RECORD_S, ROTATE_NOTICES, Worker, chunk_seed, warm_up

__all__ = [
    "COMFORTABLE_LEAD_S",
    "EXIT_FAILED",
    "EXIT_MODEL_UNAVAILABLE",
    "EXIT_OK",
    "FRESH_HEARTBEATS",
    "LEASE_SKEW_MS",
    "MAX_RECORD_S",
    "QUANTUM_S",
    "ROTATE_NOTICES",
    "Candidate",
    "CastView",
    "ChunkLike",
    "ChunkPolicyLike",
    "ChunkTimes",
    "DeadlinePolicy",
    "Decision",
    "EncoderFactory",
    "EncoderLike",
    "EngineLike",
    "FifoPolicy",
    "Idle",
    "Parts",
    "PlanTiming",
    "Policy",
    "Run",
    "Sleep",
    "Supervisor",
    "SynthesisLike",
    "VoicesLike",
    "Watermark",
    "Worker",
    "WorkerConfig",
    "chunk_seed",
    "committed_offset",
    "default_worker_id",
    "describe_exit",
    "lease_held",
    "make_policy",
    "plan_timing",
    "queue_depth",
    "queue_position",
    "ready_workers",
    "run_worker",
    "warm_up",
    "worker_alive",
]

for _name in __all__:
    _value = globals()[_name]
    if getattr(_value, "__module__", "").startswith("speechd.worker._"):
        _value.__module__ = __name__
