"""One chunk on the engine thread, and the records it becomes.

A chunk is synthesized (seeded from the cast id and the chunk's index, so a chunk made twice
sounds the same), cut into records of at most `MAX_RECORD_S`, and encoded by the cast's one
encoder, which continues the file across records and attempts. The record that ends the chunk
carries the resume checkpoint (`k`): the encoder's checkpoint, the playable sequence's samples
and compute so far; a new attempt goes on from the last such record (`Resume`).
"""

from __future__ import annotations

import base64
import hashlib
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from speechd.casts import AudioChunk, audio_record, record_words
from speechd.durable import MAX_BATCH_BYTES, MAX_BATCH_RECORDS, AppendRecord

from ._policy import ChunkTimes
from ._protocols import ChunkLike, ChunkPolicyLike, EngineLike

if TYPE_CHECKING:
    from ._cast import Admitted

__all__ = [
    "MAX_RECORD_S",
    "ChunkFailed",
    "Rendered",
    "Resume",
    "batches",
    "chunk_records",
    "chunk_seed",
    "read_resume",
    "render",
    "warm_up",
]

MAX_RECORD_S = 15.0  # longest audio in one record: 15 s of 16-bit wav is ~720 KB < 1 MiB
_WARM_UP_CHUNKS = 4
_WARM_UP_TEXT = (
    "Hello there. This short warm up measures how fast this machine speaks, "
    "so that the first listener is served well. It reads a few sentences of different "
    "lengths, because a long chunk costs a little more per second of audio than a short one, "
    "and a short one pays a fixed price for every call on top of that."
)


def chunk_seed(cast_id: str, index: int) -> int:
    """The synthesis seed of chunk `index` of `cast_id`: the same in every attempt."""
    digest = hashlib.blake2b(f"{cast_id}/{index}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big")


def warm_up(
    engine: EngineLike, chunk_policy: ChunkPolicyLike, voice: str, times: ChunkTimes
) -> None:
    """Synthesize the chunks of a short text, short and long, and record their costs in
    `times` (the first call pays one-off costs: it is made twice, and measured the second
    time)."""
    chunks = engine.plan(_WARM_UP_TEXT, voice, chunk_policy.with_rtf(0.0, max_chunk_s=5.0))
    for n, chunk in enumerate([*chunks[:1], *chunks[:_WARM_UP_CHUNKS]]):
        begun = time.perf_counter()
        synthesis = engine.synthesize(chunk, voice, 1.0)
        gen_s = time.perf_counter() - begun
        samples = int(np.asarray(synthesis.pcm).size)
        if n > 0 and samples:
            times.observe(
                units=len(chunk.phonemes),
                chars=len(chunk.text),
                speed=1.0,
                gen_s=gen_s,
                audio_s=samples / engine.sample_rate,
            )


class Resume(msgspec.Struct, frozen=True, array_like=True):
    """The resume checkpoint (`k`) of a record that ends its chunk: the playable sequence's
    samples and compute (ms) up to it, and the encoder's checkpoint after it."""

    samples: int
    gen_ms: int
    encoder: bytes


_resume_encoder = msgspec.msgpack.Encoder()
_resume_decoder = msgspec.msgpack.Decoder(Resume)


def read_resume(value: bytes) -> Resume:
    """A `k` header's checkpoint (ValueError if it is not one)."""
    try:
        return _resume_decoder.decode(base64.b64decode(value, validate=True))
    except (msgspec.DecodeError, ValueError) as exc:
        raise ValueError(f"not a resume checkpoint: {exc}") from exc


class ChunkFailed(Exception):
    """A chunk could not be made. `encoder_intact`: the engine failed before the encoder was
    fed, so the encoder still continues the file as it stands."""

    def __init__(self, cause: BaseException, *, encoder_intact: bool) -> None:
        super().__init__(str(cause) or type(cause).__name__)
        self.cause = cause
        self.encoder_intact = encoder_intact


@dataclass(frozen=True, slots=True)
class Rendered:
    pieces: list[tuple[int, bytes]]  # (samples, encoded bytes) per audio record
    checkpoint: bytes  # the encoder's, after the last piece (b"": none could be taken)
    gen_s: float
    words: Sequence[Any] = ()  # the synthesis's word timings (speechd.engine.WordTiming)
    unit: str = ""


def render(engine: EngineLike, cast: Admitted, chunk: ChunkLike, last: bool) -> Rendered:
    """On the engine thread: synthesize one chunk and encode it, record by record."""
    begun = time.perf_counter()
    try:
        synthesis = engine.synthesize(
            chunk, cast.recipe.voice, cast.recipe.speed, seed=chunk_seed(cast.id, chunk.index)
        )
        pcm = np.asarray(synthesis.pcm, dtype=np.float32).reshape(-1)
    except Exception as exc:
        raise ChunkFailed(exc, encoder_intact=True) from exc
    limit = int(MAX_RECORD_S * engine.sample_rate)
    parts = max(1, math.ceil(pcm.size / limit))
    try:
        encoded = [
            (p.size, cast.encoder.encode(p, final=last and i == parts - 1))
            for i, p in enumerate(np.array_split(pcm, parts))
        ]
    except Exception as exc:
        raise ChunkFailed(exc, encoder_intact=False) from exc
    checkpoint = b""
    if not last:
        try:
            checkpoint = cast.encoder.checkpoint()
        except Exception:  # a record without a checkpoint: a new attempt goes on before it
            checkpoint = b""
    words = getattr(synthesis, "words", ())  # engines without timings have none
    unit = getattr(synthesis, "unit", "")
    return Rendered(encoded, checkpoint, time.perf_counter() - begun, words, unit)


def chunk_records(
    cast: Admitted,
    chunk_index: int,
    text: str,
    rendered: Rendered,
    *,
    sample_rate: int,
    hold_ms: int = 0,
) -> tuple[list[AppendRecord], int, Resume | None]:
    """The audio records of the cast's chunk `chunk_index` as rendered, the playable
    sequence's samples after them, and the resume checkpoint the last one carries. Each
    record carries the chunk's words that start in it, timed from its own start; the first
    carries `hold_ms` (the start hold, given for the playable sequence's first chunk only)."""
    plan = cast.plan
    more = len(plan) - chunk_index - 1  # plan chunks after this one
    samples = cast.samples
    pieces = rendered.pieces
    position = plan.position_after(chunk_index)
    records = []
    state: Resume | None = None
    for n, (size, body) in enumerate(pieces):
        begin_ms = samples * 1000 // sample_rate
        begin = samples - cast.samples  # where this record starts in the chunk's PCM
        samples += size
        duration_ms = samples * 1000 // sample_rate - begin_ms
        final = n == len(pieces) - 1
        words = record_words(
            rendered.words, begin, begin + size, duration_ms, sample_rate, final=final
        )
        resume = b""
        if n == len(pieces) - 1 and rendered.checkpoint:
            gen_ms = round((cast.gen_s + rendered.gen_s) * 1000)
            state = Resume(samples=samples, gen_ms=gen_ms, encoder=rendered.checkpoint)
            resume = base64.b64encode(_resume_encoder.encode(state))
        audio = AudioChunk(
            attempt=cast.attempt,
            index=cast.index + n,
            planned=cast.index + len(pieces) + more,
            offset_ms=begin_ms,
            duration_ms=duration_ms,
            text=text if n == 0 else "",
            body=body,
            words=words,
            unit=rendered.unit,
            plan=position,
            start_seq=cast.start_seq,
            resume=resume,
            hold_ms=hold_ms if n == 0 else 0,
        )
        records.append(audio_record(audio))
    return records, samples, state


def batches(records: Sequence[AppendRecord]) -> list[list[AppendRecord]]:
    """Split `records` into appends within the store's batch limits."""
    out: list[list[AppendRecord]] = []
    current: list[AppendRecord] = []
    size = 0
    for record in records:
        weight = len(record.body) + sum(len(k) + len(v) for k, v in record.headers)
        if current and (len(current) >= MAX_BATCH_RECORDS or size + weight > MAX_BATCH_BYTES):
            out.append(current)
            current, size = [], 0
        current.append(record)
        size += weight
    if current:
        out.append(current)
    return out
