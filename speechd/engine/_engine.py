"""The synchronous engine a worker owns: text -> chunks -> 24 kHz float32 PCM.

The engine is the part every runtime shares: voices and blends (`_packs`), the G2P of each
language and the planners it opens (the text front end, `speechd.text`), the phoneme
vocabulary, trimming, word timing (`_timing`), the fingerprint and the `Synthesis` it
returns. A runtime (`_runtime`) only turns a chunk's tokens, style, speed and seed into raw
audio and predicted durations:

    torch   Kokoro's KModel layers, eagerly (`_torch`)
    onnx    ONNX Runtime over an export of the same weights (`_onnx`, `_export`)

`load_engine` (`_loading`) picks one (`EngineConfig.engine`: "auto" takes ONNX Runtime when
it is installed and the model can be exported or found, torch otherwise). Importing this
module is cheap and torch-free; the torch runtime imports torch and kokoro when it loads, the
ONNX one never does, and neither does the G2P it builds (`speechd.text.without_torch`).

Seeding: the decoder's random inputs are drawn on the host from the seed (`_runtime`), so the
same chunk, voice, speed and seed give the same PCM on a runtime and device, and no
process-wide generator is touched.

Joins: Kokoro pads every utterance with silence; each chunk's PCM has that padding cut to a
pause that fits how the chunk ends (`_trim`), so chunks played back to back sound like one
utterance rather than a string of them. A pause the text asks for (SSML `break`) is a chunk of
its own, silent, and never reaches the model: `silence` makes it (zeros), and `synthesize`
hands such a chunk to it.

Batches: `synthesize_batch` renders several chunks in one forward pass where the runtime can
(`_batch`: each item as it would be alone, within float rounding; a failure stays with its
item).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import math
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from speechd.errors import CastFailed, InvalidRequest, SpeechdError
from speechd.text import (
    FLUSH_S,
    G2P,
    MAX_SPEED,
    MIN_SPEED,
    MODEL_MAX_TOKENS,
    Chunk,
    ChunkPolicy,
    LexiconFile,
    Planner,
    UnitKind,
    build_g2p,
    unit_kind,
    without_torch,
)

from ._batch import MAX_BATCH_TOKENS, BatchItem, batch_passes
from ._config import SAMPLE_RATE
from ._device import warm_cuda
from ._files import ModelFolder
from ._heap import HeapTrimmer
from ._memory import MemoryBudget, held_bytes
from ._packs import VoicePacks
from ._resident import ResidentRuntime
from ._runtime import Inference, Request, Runtime
from ._sanity import SanityReport
from ._stop import Stop
from ._timing import WordTiming, word_timings
from ._torch import quiet_third_party
from ._trim import chunk_ending, silence_samples, trim_silence
from ._voices import VoiceBook

__all__ = ["Engine", "Synthesis", "silence"]

log = logging.getLogger("speechd.engine")


@dataclass(frozen=True)
class Synthesis:
    """One chunk's audio: float32 mono PCM at `sample_rate`, how the model timed it, and
    where its words (or phrases: `unit`, from the voice's language, as the worker plans and
    speaks with one voice) sound in it (`_timing.WordTiming`; empty when the model gave
    no usable durations). Every runtime fills all of it through the same post-processing."""

    pcm: npt.NDArray[np.float32]
    sample_rate: int = SAMPLE_RATE
    words: tuple[WordTiming, ...] = ()
    unit: UnitKind = "word"
    durations: tuple[int, ...] = ()
    """Frames (`SAMPLES_PER_FRAME` samples of the model's output) per token as decoded: the
    start marker, one per character of `tokens`, the end marker. Empty when the runtime could
    not tell (a foreign ONNX export without that output)."""
    head: int = 0
    """Samples of the model's output cut before `pcm[0]` (`trim_silence`): token k starts at
    `sum(durations[:k]) * SAMPLES_PER_FRAME - head` in `pcm`."""
    tokens: str = ""
    """The chunk's phonemes the model read (those in its vocabulary), in order."""

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / self.sample_rate


class Engine:
    """Kokoro-82M on one runtime and device. Synchronous and not thread-safe: one worker
    owns it."""

    sample_rate: int = SAMPLE_RATE

    def __init__(
        self, runtime: Runtime, folder: ModelFolder, voices: VoiceBook, vocab: Mapping[str, int]
    ) -> None:
        self._runtime = runtime
        self._folder = folder
        self.voices = voices
        self._vocab = dict(vocab)
        self._packs = VoicePacks(voices, folder.voice_path)
        self._g2p: dict[str, G2P] = {}
        self._g2p_lock = threading.Lock()
        self._trim_heap = HeapTrimmer() if runtime.device == "cpu" else None
        self._resident = runtime if isinstance(runtime, ResidentRuntime) else None
        self.memory: MemoryBudget | None = None
        """The device memory budget chunks are planned within (`load_engine` sets it)."""
        self.sanity: SanityReport | None = None
        """What the sanity check at load measured (an accelerator only)."""
        self.load_s = 0.0
        """Seconds the last `load` took, its warm-up included (0.0 before any)."""
        self._lexicon: LexiconFile | None = None

    def use_lexicon(self, path: str | None) -> None:
        """Apply the lexicon file at `path` to every plan opened from now on (reloaded when
        it changes; see `_lexicon`); None: none. LexiconError or OSError if it cannot be
        read now."""
        self._lexicon = LexiconFile(path) if path else None

    @property
    def plan_version(self) -> str:
        """What besides the policy decides a plan's chunks here: the lexicon in force."""
        return f"lexicon:{self._lexicon.current().digest}" if self._lexicon else ""

    @functools.cached_property
    def voice_version(self) -> str:
        """What decides the voices an SSML plan's `<voice>` names resolve to: the voices
        installed, the aliases and the default voice (`VoiceBook.digest`)."""
        return self.voices.digest

    @property
    def runtime(self) -> str:
        """The runtime's name: "torch" or "onnx"."""
        return self._runtime.name

    @property
    def device(self) -> str:
        return self._runtime.device

    @property
    def graph(self) -> str:
        """The decoder the runtime speaks with ("float", "fused", or "int8" on ONNX Runtime on
        a CPU: see `EngineConfig.graph`); "" for a runtime that does not say."""
        return str(getattr(self._runtime, "graph", ""))

    @property
    def detail(self) -> str:
        """The runtime's own description (version, providers, threads)."""
        return self._runtime.detail

    @property
    def fallback(self) -> str:
        """Why the engine left the device it was asked for, for the CPU ("": it has not)."""
        return self._resident.fallback if self._resident is not None else ""

    # ------------------------------------------------------------------ residency

    @property
    def resident(self) -> bool:
        """Whether the model is held now (see `unload`)."""
        return self._resident is None or self._resident.resident

    def unload(self) -> None:
        """Give the model back: the runtime and its weights, and the memory they held on the
        device (torch's CUDA cache, ONNX Runtime's sessions) and in the C heap. Voices, G2P
        and planning stay, so casts are planned while the model is away; `load`, or the next
        `synthesize`, takes it again."""
        if self._resident is not None:
            self._resident.unload()

    def load(self) -> float:
        """Take the model again after `unload`, and warm it up as `load_engine` did (on a
        CUDA device `warm_cuda`, elsewhere one short chunk), so the chunk that follows is
        as fast as any; the seconds it all took (0.0 when it was held)."""
        if self._resident is None or self._resident.resident:
            return 0.0
        started = time.perf_counter()
        self._resident.load()
        if self.device.startswith("cuda"):
            warm_cuda(self)
        else:
            self.warm_up()
        self.load_s = time.perf_counter() - started
        log.info("Kokoro-82M taken again on %s in %.2f s", self.device, self.load_s)
        return self.load_s

    def held_bytes(self) -> int | None:
        """Device memory the engine holds now, where its runtime can tell (torch on CUDA:
        its caching allocator's reserve); None elsewhere."""
        if not self.resident:
            return 0 if self.device != "cpu" else None
        return held_bytes(self.runtime, self.device)

    def __repr__(self) -> str:
        return (
            f"Engine(runtime={self.runtime!r}, device={self.device!r}, "
            f"voices={len(self.voices.installed)})"
        )

    @functools.cached_property
    def fingerprint(self) -> str:
        """Names the weights this engine speaks with (file name and size, and a digest of the
        model's config) and the runtime that runs them (`Runtime.fingerprint`): a cast made
        partly with other weights, or on the other runtime, must not be continued (torch and
        ONNX Runtime make the same speech, not the same bits: a switch keeps no chunks)."""
        weights = self._folder.weights
        config = hashlib.blake2b(self._folder.config.read_bytes(), digest_size=6).hexdigest()
        runtime = self._runtime.fingerprint
        return f"kokoro:{weights.name}:{weights.stat().st_size}:{config}:{runtime}"

    # ------------------------------------------------------------------ planning

    def plan(self, text: str, voice: str, policy: ChunkPolicy | None = None) -> list[Chunk]:
        """Normalise `text`, G2P it for `voice`'s language and cut it into chunks.

        Returns [] when nothing speakable is left (emoji only, say).
        """
        return list(self.iter_plan(text, voice, policy))

    def iter_plan(
        self, text: str, voice: str, policy: ChunkPolicy | None = None
    ) -> Iterator[Chunk]:
        """`plan`, lazily: the first chunk is ready after G2P of the first few hundred
        characters, whatever the length of the text."""
        return self.planner(voice, policy, text=text, done=True).chunks()

    def planner(
        self,
        voice: str,
        policy: ChunkPolicy | None = None,
        *,
        text: str = "",
        done: bool = False,
        position: str | None = None,
        flush_s: float = FLUSH_S,
        ssml: bool = False,
        normalize: bool = True,
    ) -> Planner:
        """An incremental planner for `voice`'s language (see `Planner`): fed `text` (all of
        it when `done`), or continuing from a `position` one of these reported (then fed the
        same text from its beginning). `ssml`: the text is an SSML document (whole), whose
        `<voice>` names resolve here as a request's voice does and whose languages get their
        own G2P; `normalize` False: read as sent (see `Planner`). The deployment's lexicon
        applies."""
        g2p = self._g2p_for(self.voices.language(voice))
        if self.memory is not None and self.memory.chunk_s > 0:
            policy = (policy or ChunkPolicy()).with_memory(self.memory.chunk_s)
        reading = {}
        if ssml:
            reading = {
                "voice": self.voices.resolve(voice),
                "voices": self._voice_named,
                "g2ps": self._g2p_for,
            }
        return Planner(
            g2p,
            policy,
            text=text,
            done=done,
            position=position,
            flush_s=flush_s,
            ssml=ssml,
            normalize=normalize,
            lexicon=self._lexicon.current() if self._lexicon else None,
            **reading,  # type: ignore[arg-type]
        )

    def _voice_named(self, name: str) -> tuple[str, str]:
        """The spec and language code of a voice an SSML `<voice>` names (UnknownVoice)."""
        spec = self.voices.resolve(name)
        return spec, self.voices.language(spec)

    def warm_up(self, voice: str | None = None) -> None:
        """Build the default language's G2P and run one short synthesis, so the first real
        request does not pay for lazy initialisation."""
        voice = voice or self.voices.default_voice
        for chunk in self.plan("Warming up.", voice):
            self.synthesize(chunk, voice, 1.0, seed=0)

    # ------------------------------------------------------------------ synthesis

    def synthesize(
        self,
        chunk: Chunk,
        voice: str,
        speed: float = 1.0,
        *,
        seed: int | None = None,
        stop: Stop | None = None,
    ) -> Synthesis:
        """Audio for one planned chunk. Same chunk, voice, speed and seed: same PCM on the
        same runtime and device (a foreign ONNX export draws its own noise). The chunk's own
        `rate` scales `speed` (kept within the speed bounds). `voice` is the cast's: a chunk
        planned with another (SSML `<voice>`: `chunk.voice`) is read with that one
        (`chunk_voice`), here and in `synthesize_batch` alike. A silent chunk (a pause) is
        `silence(chunk)`: the model is not asked. `stop`, once set from another thread,
        ends the synthesis early with Preempted (`_stop`)."""
        if _is_pause(chunk):
            return silence(chunk)
        request, kept = self._request(chunk, voice, speed, seed)
        if stop is None:
            output = self._runtime.infer(*request)
        else:
            with self._runtime.stoppable(stop):
                output = self._runtime.infer(*request)
        result = self._finish(chunk, voice, kept, output)
        del output
        self._trim_c_heap()
        return result

    @property
    def max_batch(self) -> int:
        """The most chunks `synthesize_batch` renders in one pass: 16 where the runtime
        batches (torch; speechd's ONNX export), 1 where it cannot (a foreign or pre-batching
        ONNX export: then every item is rendered alone)."""
        return self._runtime.max_batch

    #: The most padded tokens (items x the longest item's phonemes + 2) in one pass; a
    #: batch over it, or over `max_batch` items, is rendered in several passes.
    max_batch_tokens: int = MAX_BATCH_TOKENS

    def prepare_batch(self, max_items: int) -> None:
        """Say how large the batches will be (the worker's `--max-batch`, or what `auto`
        chose): above 1, what only batches use is opened now rather than at the first batch
        (ONNX Runtime's batched sessions: seconds, and ~330 MB for their own copy of the
        weights); at 1 it is let go, and the C heap trimmed (opened again, if a batch comes
        anyway). Optional: `synthesize_batch` works without it. CastFailed when it cannot be
        opened."""
        self._runtime.prepare_batch(max_items)
        if max_items <= 1 and self._trim_heap is not None:
            # What the batched sessions held goes back to the system: measured on ONNX
            # Runtime on a CPU, `auto`'s measurement left RSS 924 MiB, 603 MiB once trimmed.
            self._trim_heap.trim()

    def synthesize_batch(
        self, items: Sequence[BatchItem], *, isolate: bool = True
    ) -> list[Synthesis | SpeechdError]:
        """`synthesize` for each item, in as few forward passes as `max_batch` and
        `max_batch_tokens` allow: one result per item, in order. An item's audio does not
        depend on its batch-mates: with the same seed, its durations and word timings are
        those of `synthesize`, its samples within `BATCH_TOLERANCE` (relative RMS) of them.
        A batch of one is `synthesize` (its error returned, not raised).

        A failure stays with its item: an item the engine refuses (speed, phonemes, voice)
        gets its own error and the others go on; when a batched pass fails (CastFailed:
        out of memory, say), its items are rendered again one at a time, so that only an
        item that fails alone gets an error (`isolate=False` raises the pass's CastFailed
        instead: for measuring batches, which must not time items alone).
        """
        results: list[Synthesis | SpeechdError | None] = [None] * len(items)
        ready: list[tuple[int, tuple[int, Request, str]]] = []
        for place, item in enumerate(items):
            if _is_pause(item.chunk):
                results[place] = silence(item.chunk)
                continue
            try:
                request, kept = self._request(item.chunk, item.voice, item.speed, item.seed)
            except SpeechdError as exc:
                results[place] = exc
                continue
            ready.append((len(kept) + 2, (place, request, kept)))
        for batch in batch_passes(ready, self.max_batch, self.max_batch_tokens):
            group = [entry for _, entry in batch]
            outputs = self._infer_together([request for _, request, _ in group], isolate)
            for (place, _, kept), output in zip(group, outputs, strict=True):
                item = items[place]
                results[place] = (
                    output
                    if isinstance(output, SpeechdError)
                    else self._finish_safely(item.chunk, item.voice, kept, output)
                )
            del outputs
            self._trim_c_heap()
        assert all(r is not None for r in results), "every item has its result"
        return results  # type: ignore[return-value]

    def _request(
        self, chunk: Chunk, voice: str, speed: float, seed: int | None
    ) -> tuple[Request, str]:
        """What the runtime is asked for a chunk, and the phonemes it reads (those of the
        chunk in the model's vocabulary); InvalidRequest, UnknownVoice as `synthesize`."""
        if not (isinstance(speed, int | float) and math.isfinite(speed)) or not (
            MIN_SPEED <= speed <= MAX_SPEED
        ):
            raise InvalidRequest(
                f"speed must be between {MIN_SPEED} and {MAX_SPEED}, got {speed!r}.",
                param="speed",
            )
        phonemes = chunk.phonemes
        if not phonemes or len(phonemes) > MODEL_MAX_TOKENS:
            raise InvalidRequest(
                f"A chunk holds 1 to {MODEL_MAX_TOKENS} phonemes, got {len(phonemes)}.",
                param="input",
            )
        style = self._packs.style(chunk_voice(chunk, voice), len(phonemes))
        kept = "".join(p for p in phonemes if p in self._vocab)
        speed = chunk_speed(chunk, speed)
        return Request([self._vocab[p] for p in kept], style, float(speed), seed), kept

    def _infer_together(
        self, requests: list[Request], isolate: bool
    ) -> list[Inference | SpeechdError]:
        if len(requests) > 1:
            try:
                return list(self._runtime.infer_batch(requests))
            except Exception as exc:  # CastFailed from the runtime, or a fault of ours
                if not isolate:
                    if isinstance(exc, SpeechdError):
                        raise
                    raise CastFailed(f"Batched synthesis failed: {exc}") from exc
                log.warning(
                    "a batched pass of %d chunks failed (%s); rendering them one at a time",
                    len(requests),
                    exc,
                )
        return [self._infer_alone(request) for request in requests]

    def _infer_alone(self, request: Request) -> Inference | SpeechdError:
        try:
            return self._runtime.infer(*request)
        except Exception as exc:
            return self._failure(exc)

    def _finish_safely(
        self, chunk: Chunk, voice: str, kept: str, output: Inference
    ) -> Synthesis | SpeechdError:
        try:
            return self._finish(chunk, voice, kept, output)
        except Exception as exc:
            return self._failure(exc)

    def _failure(self, exc: Exception) -> SpeechdError:
        """An item's failure as its result: speechd's own errors as they are, anything else
        (not the runtime's CastFailed: a fault of ours) as CastFailed, still this item's."""
        if isinstance(exc, SpeechdError):
            return exc
        failed = CastFailed(f"Synthesis failed on {self.device}: {exc}")
        failed.__cause__ = exc
        return failed

    def _finish(self, chunk: Chunk, voice: str, kept: str, output: Inference) -> Synthesis:
        """The runtime's raw output trimmed and timed, as every runtime's is."""
        phonemes = chunk.phonemes
        durations = None if output.durations is None else output.durations.tolist()
        pcm, head = trim_silence(output.audio, durations, chunk_ending(chunk))
        vocab = self._vocab
        words = word_timings(phonemes, chunk.words, durations, head=head, pcm=pcm, vocab=vocab)
        return Synthesis(
            pcm,
            words=words,
            unit=unit_kind(
                getattr(chunk, "lang", "") or self.voices.language(chunk_voice(chunk, voice))
            ),
            durations=tuple(durations or ()),
            head=head,
            tokens=kept,
        )

    def _trim_c_heap(self) -> None:
        if self._trim_heap is None and self.device == "cpu":  # fell back to the CPU
            self._trim_heap = HeapTrimmer()
        if self._trim_heap is not None:
            self._trim_heap()

    def _g2p_for(self, lang: str) -> G2P:
        with self._g2p_lock:
            g2p = self._g2p.get(lang)
            if g2p is None:
                started = time.perf_counter()
                lean = without_torch() if self.runtime != "torch" else contextlib.nullcontext()
                with quiet_third_party(), lean:
                    g2p = build_g2p(lang)
                log.info("G2P for %r ready in %.1f s", lang, time.perf_counter() - started)
                self._g2p[lang] = g2p
            return g2p


def chunk_voice(chunk: Chunk, voice: str) -> str:
    """The voice a chunk is read with: its own (SSML `<voice>`), else the cast's `voice`."""
    return getattr(chunk, "voice", "") or voice


def silence(chunk: Chunk) -> Synthesis:
    """A pause's chunk made without the model (`Chunk.silent`): zeros, as long as
    `silence_samples` says (its `pause_ms`, or its `lead_ms` less what the speech after it
    keeps before its voice), and its marks, at its start. A silent chunk is at most
    `speechd.text`'s `SILENCE_CHUNK_MS`, so that is the most silence ever made at once; the
    worker writes it as it writes any chunk, without the engine."""
    pcm = np.zeros(silence_samples(chunk), np.float32)
    marks = tuple(
        WordTiming("", 0, 0, span.source, span.mark)
        for span in getattr(chunk, "words", ())
        if getattr(span, "mark", "")
    )
    return Synthesis(pcm, words=marks)


def _is_pause(chunk: Chunk) -> bool:
    """A silent chunk: no phonemes, a pause (a chunk with neither is refused as ever)."""
    return not chunk.phonemes and bool(
        getattr(chunk, "pause_ms", 0) or getattr(chunk, "lead_ms", 0)
    )


def chunk_speed(chunk: Chunk, speed: float) -> float:
    """The speed a chunk is read at: the cast's, scaled by the chunk's own `rate` (SSML
    `prosody`), within the speed bounds."""
    rate = getattr(chunk, "rate", 1.0)
    return speed if rate == 1.0 else min(max(speed * rate, MIN_SPEED), MAX_SPEED)
