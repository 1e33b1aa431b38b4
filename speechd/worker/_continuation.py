"""Casts' plans, and how a new attempt goes on from the playable sequence before it (resume
by reference; `_attempts` opens the attempt, see there).

An attempt goes on from the last kept record that ends a chunk: its plan from that record's
position (`p`), its encoder from the record's checkpoint (`k`, a `Resume`: written by the
step's outcome, `_update`, read here), with the timing the earlier attempt's `start` names,
so it cuts the very chunks the earlier one would have. It cannot when the model, the encoder
or the plan (chunk policy, timing, planner) differ from what that `start` names, or when there
is no checkpoint to go on from.
"""

from __future__ import annotations

import base64
import functools
import logging
from dataclasses import dataclass

import msgspec

from speechd.casts import CastHead, resume_point
from speechd.casts.schema import Recipe
from speechd.durable import Store

from ._costs import PlanTiming
from ._plan import CastPlan, model_fingerprint, open_plan, plan_fingerprint
from ._protocols import ChunkPolicyLike, EncoderFactory, EncoderLike, EngineLike
from ._thread import EngineThread

__all__ = ["Going", "Plans", "Resume", "read_resume", "resume_header"]

log = logging.getLogger("speechd.worker")


class Resume(msgspec.Struct, frozen=True, array_like=True):
    """The resume checkpoint (`k`) of a record that ends its chunk: the playable sequence's
    samples and compute (ms) up to it, and the encoder's checkpoint after it."""

    samples: int
    gen_ms: int
    encoder: bytes


_resume_encoder = msgspec.msgpack.Encoder()
_resume_decoder = msgspec.msgpack.Decoder(Resume)


def resume_header(state: Resume) -> bytes:
    """`state` as a `k` header's value."""
    return base64.b64encode(_resume_encoder.encode(state))


def read_resume(value: bytes) -> Resume:
    """A `k` header's checkpoint (ValueError if it is not one)."""
    try:
        return _resume_decoder.decode(base64.b64decode(value, validate=True))
    except (msgspec.DecodeError, ValueError) as exc:
        raise ValueError(f"not a resume checkpoint: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Going:
    """How a new attempt goes: its plan and timing, the records it keeps, whether they are
    all of it (only the eos is missing), the kept records' resume state and its encoder."""

    plan: CastPlan
    timing: PlanTiming
    keep: int
    complete: bool
    resume: Resume | None
    encoder: EncoderLike


class Plans:
    """Casts' plans for one engine and chunk policy (made on the engine thread), and the
    continuation of a cast's playable sequence."""

    def __init__(
        self,
        store: Store,
        engine: EngineLike,
        thread: EngineThread,
        chunk_policy: ChunkPolicyLike,
        encoders: EncoderFactory,
    ) -> None:
        self._store = store
        self._engine = engine
        self._thread = thread
        self._chunk_policy = chunk_policy
        self._encoders = encoders

    def policy(self, recipe: Recipe, timing: PlanTiming) -> ChunkPolicyLike:
        """The chunk policy a cast of `recipe` is planned with, for `timing`."""
        return timing.apply(self._chunk_policy).with_speed(recipe.speed)

    async def plan(
        self, recipe: Recipe, timing: PlanTiming, *, position: str | None = None
    ) -> CastPlan:
        """The cast's plan, from its start or from `position` (ValueError if the planner
        cannot read it); not stepped yet: the loop plans it a step at a time."""
        policy = self.policy(recipe, timing)
        make = functools.partial(
            open_plan,
            live=recipe.live,
            position=position,
            ssml=recipe.input_format == "ssml",
            normalize=recipe.normalize,
        )
        return await self._thread.call(make, self._engine, recipe.text, recipe.voice, policy)

    async def continuation(self, cast_id: str, head: CastHead, recipe: Recipe) -> Going | None:
        """How a new attempt goes on from `head`'s playable sequence; None when it cannot
        (then it starts over)."""
        latest = head.start
        if latest is None or not head.spans or latest.rtf is None or not latest.plan:
            return None
        fmt, rate = recipe.format, self._engine.sample_rate
        fresh = self._encoders(fmt, rate)
        if (latest.model, latest.encoder) != (model_fingerprint(self._engine), fresh.fingerprint):
            return None
        timing = PlanTiming(latest.rtf, latest.overhead_s, latest.max_chunk_s)
        if plan_fingerprint(self._engine, self.policy(recipe, timing)) != latest.plan:
            return None
        final = head.final
        point = await resume_point(self._store, cast_id, head)
        try:
            resume = read_resume(point.resume) if point is not None else None
            if final is not None and final.index == final.planned - 1:
                # Every chunk is durable (the record that ended the file says so: see `n` in
                # `_plan`; it has no checkpoint); only the eos is missing.
                plan = await self.plan(recipe, timing, position=final.plan or None)
                return Going(plan, timing, head.length, True, resume, fresh)
            if point is None or resume is None or not point.plan:
                return None
            plan = await self.plan(recipe, timing, position=point.plan)
            encoder = self._encoders(fmt, rate, resume=resume.encoder)
        except ValueError as exc:
            log.warning("cast %s: its audio cannot be continued (%s); starting over", cast_id, exc)
            return None
        return Going(plan, timing, point.index + 1, False, resume, encoder)
