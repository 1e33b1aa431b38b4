"""The cast worker: job intake, fair live scheduling, crash-safe progress, supervision.

`run_worker` is the body of a worker process; `Supervisor` runs it in a spawned child and
restarts it when it dies; `Worker` is the same loop in-process, over an injected store and
engine. `worker_health` (why no worker is ready, too), `known_voices` and `QueueLine` (the line
of waiting casts, learnt a little at a time) read worker health, voices and the line from the
store alone, for the api. Importing this package never imports torch.
"""

from __future__ import annotations

from ._config import WorkerConfig, default_worker_id
from ._health import (
    FRESH_HEARTBEATS,
    WorkerHealth,
    known_voices,
    ready_workers,
    worker_alive,
    worker_health,
)
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
from ._queue import QueueLine, QueuePlace, committed_offset, queue_depth, queue_position
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
    "QueueLine",
    "QueuePlace",
    "Run",
    "Sleep",
    "Supervisor",
    "SynthesisLike",
    "VoicesLike",
    "Watermark",
    "Worker",
    "WorkerConfig",
    "WorkerHealth",
    "chunk_seed",
    "committed_offset",
    "default_worker_id",
    "describe_exit",
    "known_voices",
    "lease_held",
    "make_policy",
    "plan_timing",
    "queue_depth",
    "queue_position",
    "ready_workers",
    "run_worker",
    "warm_up",
    "worker_alive",
    "worker_health",
]

for _name in __all__:
    _value = globals()[_name]
    if getattr(_value, "__module__", "").startswith("speechd.worker._"):
        _value.__module__ = __name__
