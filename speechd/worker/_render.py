"""One chunk on the engine thread: synthesized, cut into the pieces its records will hold, and
encoded.

A chunk is synthesized (seeded from the cast id and the chunk's index, so a chunk made twice
sounds the same; a pause's chunk is silence made here, never by the engine), cut into pieces,
and encoded by the cast's one encoder, which continues the
file across records and attempts; the encoder's checkpoint after the chunk is taken too. What
the pieces become (the records, the resume checkpoint `k` on the last, the eos) is the step's
outcome (`_update`), worked out on the loop.

**Records fit the store.** A record holds at most `MAX_RECORD_S` of audio, and fewer samples
where the store's `limits` bind (`record_samples`): a stock NATS server's 1 MiB messages hold
about 20 s of 16-bit PCM, and a store may take less. The chunk is cut, before it is encoded,
into equal pieces of PCM that fit `max_record_bytes` with room for the record's headers (its
text, its words, the checkpoint) at the format's most encoded bytes per sample, so every
record is one whole encoder call: it decodes on its own as its format's `RecordLayout` says,
its words are its own, and resume still keeps whole chunks. The records of a chunk are then
checked against the limits before anything is appended (`_update.step_outcome`): one over
them fails the chunk, like an engine error, and appends nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from speechd.durable import Limits, RecordTooLarge
from speechd.engine import Preempted, Stop, silence  # torch-free
from speechd.errors import ModelUnavailable

from ._cast import Admitted
from ._costs import ChunkTimes
from ._plan import pause_s
from ._protocols import ChunkLike, ChunkPolicyLike, EncoderLike, EngineLike

__all__ = [
    "MAX_RECORD_S",
    "ChunkFailed",
    "Rendered",
    "chunk_seed",
    "end_file",
    "measure_batches",
    "record_samples",
    "render",
    "render_batch",
    "warm_up",
]

log = logging.getLogger("speechd.worker")

MAX_RECORD_S = 15.0  # longest audio in one record (15 s of 16-bit wav is ~720 KB)
# The most bytes an encoder returns per input sample, by format (white noise, the worst case,
# gives 2.0 for pcm and wav, 2.001 plus frame headers for flac, 1/3 for 64 kbit/s mp3 and
# under 0.36 for aac and opus); a format not listed counts as 16-bit PCM plus a margin.
_BYTES_PER_SAMPLE = {"pcm": 2.0, "wav": 2.0, "flac": 2.05, "mp3": 0.4, "aac": 0.45, "opus": 0.3}
_BYTES_PER_SAMPLE_UNKNOWN = 2.5
_HELD_BACK = 4096  # bytes a record may carry beyond its own samples: a file header, and
# what the codec held back from the record before (a frame or an Ogg page or two)
_FIXED_HEADERS = 512  # e a i n o d u p x, their values and the store's per-header cost
# `k`: base64 of a Resume, whose encoder checkpoint holds at most TAIL_SAMPLES (16,384) s16
# samples plus a few fields (speechd.audio._resume.Checkpoint): 44 KiB, rounded up.
_RESUME_HEADER = 48 * 1024
_WORD_JSON = 48  # a word's `[start_ms,end_ms,"...",[begin,end]]` beyond its text
_MIN_RECORD_S = 0.02  # fewer samples than this per record: the store is too small to use
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
    words: Sequence[Any] = ()  # the synthesis's word timings (speechd.engine._timing.WordTiming)
    unit: str = ""
    batched: int = 1  # how many items the batch it was made in had
    alone_s: float | None = None  # what it would have cost alone (`ChunkTimes` learns that)


def record_samples(
    limits: Limits, fmt: str, sample_rate: int, *, text: str, words: Sequence[Any] = ()
) -> int:
    """The most samples one audio record of `fmt` may hold so that it fits `limits`, with
    room for headers carrying `text` and `words` (a chunk's, so any of its records fits) and
    a resume checkpoint; never more than `MAX_RECORD_S`. RecordTooLarge when the store's
    records are too small to hold even `_MIN_RECORD_S` of audio next to those headers."""
    headers = (
        _FIXED_HEADERS
        + len(text.encode())
        + sum(
            2 * len(str(getattr(w, "text", "")).encode())
            + 2 * len(str(getattr(w, "mark", "")).encode())
            + _WORD_JSON
            for w in words
        )
        + _RESUME_HEADER
    )
    room = min(limits.max_record_bytes - headers, limits.max_body_bytes) - _HELD_BACK
    per_sample = _BYTES_PER_SAMPLE.get(fmt, _BYTES_PER_SAMPLE_UNKNOWN)
    samples = min(int(room / per_sample), int(MAX_RECORD_S * sample_rate))
    if samples < _MIN_RECORD_S * sample_rate:
        raise RecordTooLarge(
            f"this store's records ({limits.max_record_bytes} bytes) cannot hold "
            f"{_MIN_RECORD_S * 1000:.0f} ms of {fmt} next to the chunk's headers"
        )
    return samples


def render(
    engine: EngineLike, cast: Admitted, chunk: ChunkLike, last: bool, stop: Stop | None = None
) -> Rendered:
    """On the engine thread: synthesize one chunk and encode it, in records that fit the
    store (`cast.limits`, `record_samples`). A pause (`pause_s`) is not synthesized: its
    silence is made here, one chunk's worth (`speechd.text`'s `SILENCE_CHUNK_MS`) at most,
    and encoded like any audio, so the file stays one stream. With `stop`, setting it ends
    the synthesis with Preempted, before the encoder is fed (the chunk is made again later)."""
    begun = time.perf_counter()
    if pause_s(chunk) is not None:
        return _encode(engine, cast, chunk, last, silence(chunk), begun)  # type: ignore[arg-type]
    seed = chunk_seed(cast.id, chunk.index)
    try:
        if stop is None:
            synthesis = engine.synthesize(chunk, cast.recipe.voice, cast.recipe.speed, seed=seed)
        else:
            synthesis = engine.synthesize(  # type: ignore[call-arg]
                chunk, cast.recipe.voice, cast.recipe.speed, seed=seed, stop=stop
            )
    except (ModelUnavailable, Preempted):  # the device, not the chunk: the worker stops
        raise  # (`_process`); or stopped for a listener: nothing was made
    except Exception as exc:
        raise ChunkFailed(exc, encoder_intact=True) from exc
    return _encode(engine, cast, chunk, last, synthesis, begun)


def _encode(
    engine: EngineLike,
    cast: Admitted,
    chunk: ChunkLike,
    last: bool,
    synthesis: Any,
    begun: float,
    *,
    batch_s: float | None = None,
) -> Rendered:
    """`synthesis` (of `chunk`) encoded by the cast's encoder, in records that fit the
    store. `batch_s`: its share of a batch's compute, where it was made in one (then its
    `gen_s` is that share plus its own encoding)."""
    try:
        pcm = np.asarray(synthesis.pcm, dtype=np.float32).reshape(-1)
        words = getattr(synthesis, "words", ())  # engines without timings have none
        unit = getattr(synthesis, "unit", "")
        limit = record_samples(
            cast.limits, cast.encoder.format, engine.sample_rate, text=chunk.text, words=words
        )
    except Exception as exc:
        raise ChunkFailed(exc, encoder_intact=True) from exc
    encoding = time.perf_counter()
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
    done = time.perf_counter()
    gen_s = done - begun if batch_s is None else batch_s + done - encoding
    return Rendered(encoded, checkpoint, gen_s, words, unit)


def render_batch(
    engine: EngineLike, entries: Sequence[tuple[Admitted, ChunkLike, bool]]
) -> list[Rendered | ChunkFailed]:
    """On the engine thread: the next chunks of several casts (`(cast, chunk, last)`), made
    in one batch (`Engine.synthesize_batch`) and each encoded by its own cast's encoder; one
    outcome per entry, in order. A failure stays with its item: an item the engine could not
    make, or whose encoding failed, is a ChunkFailed, and the others' audio is kept. Should
    the engine raise for the whole batch, the items are made one by one (`render`), so the
    failing one is found. Each item's `gen_s` is its share of the batch's compute (by its
    length) plus its own encoding."""
    from speechd.engine import BatchItem  # torch-free

    items = [
        BatchItem(chunk, cast.recipe.voice, cast.recipe.speed, chunk_seed(cast.id, chunk.index))
        for cast, chunk, _ in entries
    ]
    begun = time.perf_counter()
    try:
        results = engine.synthesize_batch(items)  # type: ignore[attr-defined]
    except ModelUnavailable:
        raise
    except Exception as exc:
        log.warning("a batch of %d failed as a whole (%r): made one by one", len(items), exc)
        return [_alone(engine, *entry) for entry in entries]
    took = time.perf_counter() - begun
    lengths = [max(len(chunk.phonemes), 1) for _, chunk, _ in entries]
    out: list[Rendered | ChunkFailed] = []
    for (cast, chunk, last), result, length in zip(entries, results, lengths, strict=True):
        if isinstance(result, BaseException):
            out.append(ChunkFailed(result, encoder_intact=True))
            continue
        share = took * length / sum(lengths)
        try:
            made = _encode(engine, cast, chunk, last, result, begun, batch_s=share)
            out.append(dataclasses.replace(made, batched=len(entries)))
        except ChunkFailed as failed:
            out.append(failed)
    return out


def _alone(
    engine: EngineLike, cast: Admitted, chunk: ChunkLike, last: bool
) -> Rendered | ChunkFailed:
    try:
        return render(engine, cast, chunk, last)
    except ChunkFailed as failed:
        return failed


def measure_batches(engine: EngineLike, max_batch: int | None) -> tuple[dict[int, float], int]:
    """On the engine thread, at warm-up: the engine's cost per item by batch size
    (`measure_batch_costs`: 1, 2, 4, 8, and 16 on CUDA; with an explicit `max_batch` N,
    those up to N and N itself), and the batch size the worker keeps (`batch_limit`); the
    engine is then told it (`prepare_batch`). ({}, 1) for `--max-batch 1`, for an engine
    that cannot batch, and where measuring failed (logged: the worker goes on at batch 1)."""
    from speechd.engine import choose_max_batch, measure_batch_costs  # torch-free

    from ._batching import batch_limit

    if max_batch == 1 or getattr(engine, "max_batch", 1) <= 1:
        return {}, 1
    sizes = None
    if max_batch is not None:
        wanted = (1, 2, 4, 8, 16) if engine.device.startswith("cuda") else (1, 2, 4, 8)
        sizes = sorted({*(n for n in wanted if n <= max_batch), max_batch})
    try:
        costs = measure_batch_costs(engine, sizes)  # type: ignore[arg-type]
        limit = batch_limit(costs, max_batch, choose_max_batch(costs))
        engine.prepare_batch(limit)  # type: ignore[attr-defined]
    except ModelUnavailable:  # the device itself: as any warm-up chunk would say
        raise
    except Exception:  # batches are an optimisation: the worker goes on at batch 1
        log.exception("measuring batches failed: batch 1")
        with contextlib.suppress(Exception):
            engine.prepare_batch(1)  # type: ignore[attr-defined]
        return {}, 1
    log.info(
        "batches of up to %d (%s, per item: %s)",
        limit,
        "auto" if max_batch is None else f"--max-batch {max_batch}",
        ", ".join(f"{n}: {c * 1000:.1f} ms" for n, c in sorted(costs.items())) or "-",
    )
    return costs, limit


def end_file(encoder: EncoderLike) -> bytes:
    """On the engine thread: what ends the file after its last samples (an mp3's last frames,
    say; b"" for formats with nothing to add)."""
    return encoder.encode(np.zeros(0, dtype=np.float32), final=True)
