"""A cast's plan as the worker holds it: its chunks, and where each one ends in the plan.

Each audio record says where its chunk ends in the plan (header `p`, an opaque text), and a new
attempt that keeps earlier chunks asks the plan to go on from the last kept record's position
(`resume_from`). Today the whole text is planned up front (`Engine.plan`, on the engine thread)
and a position is the chunk index + 1; an incremental planner plugs in here by returning its own
resumable positions from `position_after` and taking them back in `resume_from`.

Whether a later attempt may go on from an earlier one's positions is decided by fingerprints
kept in each `start`: `plan_fingerprint` (the chunk policy as timed for the cast, which holds
the speed, and the planner's version) and `model_fingerprint` (the engine's name for its
weights). The same text planned with the same policy gives the same chunks, so equal
fingerprints mean the positions mean the same.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from ._protocols import ChunkLike, ChunkPolicyLike, EngineLike

__all__ = ["PLANNER", "CastPlan", "model_fingerprint", "plan_cast", "plan_fingerprint"]

PLANNER = "whole-text/1"
"""How the worker plans and what its positions mean: bump it when either changes."""


@dataclass(frozen=True, slots=True)
class CastPlan:
    """The chunks of one cast, in order, and the plan's fingerprint."""

    chunks: Sequence[ChunkLike]
    fingerprint: str

    def __len__(self) -> int:
        return len(self.chunks)

    def position_after(self, n: int) -> str:
        """The plan position at the end of chunk `n` (the `p` of its records)."""
        return str(n + 1)

    def resume_from(self, position: str) -> int:
        """The chunk that follows `position` (len(self) when none does); ValueError if the
        position is not one of this plan's."""
        try:
            n = int(position)
        except ValueError:
            raise ValueError(f"not a plan position: {position!r}") from None
        if not 0 < n <= len(self.chunks):
            raise ValueError(f"plan position {n} is outside this plan of {len(self.chunks)}")
        return n


def plan_fingerprint(engine: EngineLike, policy: ChunkPolicyLike) -> str:
    """What decides a cast's chunks: the planner's version and the exact chunk policy it is
    planned with (timed for the cast and at its speed)."""
    planner = getattr(engine, "plan_version", "")
    text = f"{PLANNER}|{planner}|{policy!r}"
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def model_fingerprint(engine: EngineLike) -> str:
    """The engine's name for the model it speaks with ("" if it gives none)."""
    return str(getattr(engine, "fingerprint", "") or "")


def plan_cast(engine: EngineLike, text: str, voice: str, policy: ChunkPolicyLike) -> CastPlan:
    """Plan `text` (on the engine thread: planning runs G2P)."""
    chunks: Sequence[ChunkLike] = list(engine.plan(text, voice, policy))
    return CastPlan(chunks, plan_fingerprint(engine, policy))
