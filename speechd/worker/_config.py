"""The worker's settings."""

from __future__ import annotations

import os
import secrets
import socket
from typing import Literal

import msgspec

from speechd.engine import EngineConfig  # torch-free: load_engine imports torch
from speechd.text import FLUSH_S

from ._endings import RECEIPTS
from ._policy import COMFORTABLE_LEAD_S, QUANTUM_S

__all__ = ["WorkerConfig", "default_worker_id"]


class WorkerConfig(msgspec.Struct, frozen=True):
    """How a worker runs: the one place its settings and their defaults live
    (`speechd.config.Settings.worker_config` maps the command's settings to it; `Worker` reads
    it).

    `store` (the store's URL) and `engine` are what a worker process opens and loads
    (`run_worker`, `Supervisor`); a `Worker` built in-process is handed both, and reads the
    rest. `worker_id` names the worker (None: hostname-pid-random).
    `max_active` is a hard cap on admitted casts on top of the capacity-based admission (None:
    capacity only). `retries` is how many new attempts a cast gets after failing at the same
    chunk before its job goes to `jobs/dead` (a worker dying with that chunk in flight counts,
    but ends the cast only once the same chunk has killed it twice). When every active cast is
    ahead by `comfortable_lead_s` the worker sleeps briefly. Chunks are planned to take at most
    `quantum_s` to synthesize (the longest a newcomer waits for the device). On SIGTERM the
    chunk in flight is still appended if it finishes within `stop_grace_s`, else abandoned
    (the next attempt redoes it). A live cast's unfinished clause waits `flush_s` for more
    text before it is spoken as it is.
    `policy` picks the scheduler: "deadline", or "fifo" (the baseline). `lease_s` is how long
    a cast stays this worker's without an append or a renewal (it renews every third of it);
    another worker takes it over after that (hosts' clocks must agree within a second).
    `receipts` is how many of the latest receipts `progress/done` keeps (the api's metrics
    and start estimates read them; older ones are trimmed, a few dozen at a time).
    `idle_unload_s`: after this long with nothing to make the worker gives its model back
    (`Engine.unload`), and takes it again for the next chunk (None: it keeps it).
    `max_batch`: the most chunks (of different casts) rendered in one forward pass; None is
    `auto` (measured at warm-up: the largest size that saves at least 10% per item, 1 on a
    CPU); with N, batches of up to N still form only where the measured costs save time;
    1 never batches (nor measures). See `_batching`.
    """

    store: str = ""
    engine: EngineConfig = EngineConfig()
    worker_id: str | None = None
    max_active: int | None = None
    retries: int = 2
    comfortable_lead_s: float = COMFORTABLE_LEAD_S
    quantum_s: float = QUANTUM_S
    heartbeat_s: float = 5.0
    lease_s: float = 15.0
    policy: Literal["deadline", "fifo"] = "deadline"
    stop_grace_s: float = 3.0
    receipts: int = RECEIPTS
    flush_s: float = FLUSH_S
    idle_unload_s: float | None = None
    max_batch: int | None = None

    def resolved_id(self) -> str:
        return self.worker_id or default_worker_id()


def default_worker_id() -> str:
    """hostname-pid-random, made of the characters a stream name allows."""
    host = "".join(c if c.isalnum() or c in "-_" else "-" for c in socket.gethostname())
    return f"{host or 'host'}-{os.getpid()}-{secrets.token_hex(3)}"
