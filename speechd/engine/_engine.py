"""The synchronous engine a worker owns: text -> chunks -> 24 kHz float32 PCM.

torch and kokoro are imported only inside `load_engine` and the engine's methods, so that
importing `speechd.engine` (for `VoiceBook`, `normalize_text`, the config) stays cheap and
torch-free in the api process.

Seeding: Kokoro's decoder draws random noise (the harmonic source's initial phase and its
noise excitation) from torch's default generator. With `seed`, a chunk is synthesized inside
`torch.random.fork_rng` after seeding, so the same chunk, voice, speed and seed give
bit-identical PCM on CPU, and the process-wide generator is left as it was.

Joins: Kokoro pads every utterance with silence; each chunk's PCM has that padding cut to a
pause that fits how the chunk ends (`_trim`), so chunks played back to back sound like one
utterance rather than a string of them.
"""

import functools
import hashlib
import logging
import math
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from speechd.errors import CastFailed, InvalidRequest, ModelUnavailable, SpeechdError

from ._config import MAX_SPEED, MIN_SPEED, SAMPLE_RATE, EngineConfig
from ._device import resolve_device, warm_cuda
from ._files import ModelFolder, fetch_model_folder, open_model_folder
from ._g2p import G2P, build_g2p
from ._heap import HeapTrimmer
from ._plan import MODEL_MAX_TOKENS, Chunk, ChunkPolicy
from ._planner import FLUSH_S, Planner
from ._timing import UnitKind, WordTiming, unit_kind, word_timings
from ._voices import VoiceBook

if TYPE_CHECKING:
    import torch

__all__ = ["Engine", "Synthesis", "load_engine"]

log = logging.getLogger("speechd.engine")

#: Blends are cached by spec, up to this many (single voices are always kept).
_BLEND_CACHE = 32


@dataclass(frozen=True)
class Synthesis:
    """One chunk's audio: float32 mono PCM at `sample_rate`, and where its words (or phrases:
    `unit`, from the voice's language, as the worker plans and speaks with one voice) sound
    in it (`speechd.engine.WordTiming`; empty when the model gave no usable durations)."""

    pcm: npt.NDArray[np.float32]
    sample_rate: int = SAMPLE_RATE
    words: tuple[WordTiming, ...] = ()
    unit: UnitKind = "word"

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / self.sample_rate


class Engine:
    """Kokoro-82M on one device. Synchronous and not thread-safe: one worker owns it."""

    sample_rate: int = SAMPLE_RATE

    def __init__(self, model: Any, folder: ModelFolder, voices: VoiceBook, device: str) -> None:
        self._model = model
        self._folder = folder
        self.voices = voices
        self.device = device
        self._g2p: dict[str, G2P] = {}
        self._g2p_lock = threading.Lock()
        self._packs: dict[str, torch.Tensor] = {}
        self._blends: OrderedDict[str, torch.Tensor] = OrderedDict()
        self._trim_heap = HeapTrimmer() if device == "cpu" else None

    def __repr__(self) -> str:
        return f"Engine(device={self.device!r}, voices={len(self.voices.installed)})"

    @functools.cached_property
    def fingerprint(self) -> str:
        """Names the weights this engine speaks with (file name and size, and a digest of the
        model's config): a cast made partly with other weights must not be continued."""
        weights = self._folder.weights
        config = hashlib.blake2b(self._folder.config.read_bytes(), digest_size=6).hexdigest()
        return f"kokoro:{weights.name}:{weights.stat().st_size}:{config}"

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
    ) -> Planner:
        """An incremental planner for `voice`'s language (see `Planner`): fed `text` (all of
        it when `done`), or continuing from a `position` one of these reported (then fed the
        same text from its beginning)."""
        g2p = self._g2p_for(self.voices.language(voice))
        return Planner(g2p, policy, text=text, done=done, position=position, flush_s=flush_s)

    def warm_up(self, voice: str | None = None) -> None:
        """Build the default language's G2P and run one short synthesis, so the first real
        request does not pay for lazy initialisation."""
        voice = voice or self.voices.default_voice
        for chunk in self.plan("Warming up.", voice):
            self.synthesize(chunk, voice, 1.0, seed=0)

    # ------------------------------------------------------------------ synthesis

    def synthesize(
        self, chunk: Chunk, voice: str, speed: float = 1.0, *, seed: int | None = None
    ) -> Synthesis:
        """Audio for one planned chunk. Same chunk, voice, speed and seed: same PCM (CPU)."""
        import torch

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
        pack = self._voice_pack(voice)
        style = pack[len(phonemes) - 1]
        try:
            with torch.inference_mode(), _seeded(seed, self.device):
                output = self._model(phonemes, style, float(speed), return_output=True)
        except (RuntimeError, AssertionError) as exc:  # torch errors, incl. out of memory
            raise CastFailed(f"Synthesis failed on {self.device}: {exc}") from exc
        pcm = output.audio.detach().to("cpu", torch.float32).reshape(-1).numpy()
        durations = None if output.pred_dur is None else output.pred_dur.reshape(-1).tolist()
        del output
        if self._trim_heap is not None:
            self._trim_heap()
        pcm, head = _trim(pcm, durations, _ending(phonemes))
        vocab = getattr(self._model, "vocab", None)
        words = word_timings(phonemes, chunk.words, durations, head=head, pcm=pcm, vocab=vocab)
        return Synthesis(pcm, words=words, unit=unit_kind(self.voices.language(voice)))

    def _voice_pack(self, voice: str) -> "torch.Tensor":
        import torch

        spec = self.voices.resolve(voice)
        cached = self._packs.get(spec) if "+" not in spec else self._blends.get(spec)
        if cached is not None:
            if "+" in spec:
                self._blends.move_to_end(spec)
            return cached
        parts = self.voices.weights(spec)
        packs = [self._single_pack(name) for name, _ in parts]
        if len(parts) == 1:
            return packs[0]
        blend = sum(
            (p * w for p, (_, w) in zip(packs, parts, strict=True)), torch.zeros_like(packs[0])
        )
        self._blends[spec] = blend
        while len(self._blends) > _BLEND_CACHE:
            self._blends.popitem(last=False)
        return blend

    def _single_pack(self, name: str) -> "torch.Tensor":
        import torch

        pack = self._packs.get(name)
        if pack is None:
            path = self._folder.voice_path(name)
            try:
                pack = torch.load(path, map_location="cpu", weights_only=True)
            except (OSError, RuntimeError, ValueError) as exc:
                raise ModelUnavailable(f"Cannot read voice pack {str(path)!r}: {exc}") from exc
            if not isinstance(pack, torch.Tensor) or pack.ndim < 2:
                raise ModelUnavailable(f"Voice pack {str(path)!r} is not a (510, 1, 256) tensor.")
            pack = pack.to(self.device, torch.float32)
            self._packs[name] = pack
        return pack

    def _g2p_for(self, lang: str) -> G2P:
        with self._g2p_lock:
            g2p = self._g2p.get(lang)
            if g2p is None:
                started = time.perf_counter()
                with _quiet_third_party():
                    g2p = build_g2p(lang)
                log.info("G2P for %r ready in %.1f s", lang, time.perf_counter() - started)
                self._g2p[lang] = g2p
            return g2p


#: Kokoro makes 600 samples (25 ms) of audio per predicted duration frame.
_SAMPLES_PER_FRAME = 600
#: Below this a sample counts as silent (-60 dBFS).
_SILENT = 1e-3
#: Silence kept before the voice starts.
_LEAD_S = 0.05
#: Silence kept after the voice stops, by how the chunk ends: a sentence, a clause or comma,
#: or a cut between two words (a pause there sounds like a hesitation).
_PAUSE_S = {"sentence": 0.35, "clause": 0.2, "word": 0.04}
_FADE = 120  # samples (5 ms)


def _ending(phonemes: str) -> str:
    last = phonemes.rstrip("\"')\u201d ")[-1:]
    if last in ".!?\u2026":
        return "sentence"
    return "clause" if last in ",;:\u2014" else "word"


def _trim(
    pcm: npt.NDArray[np.float32], durations: list[int] | None, ending: str
) -> tuple[npt.NDArray[np.float32], int]:
    """Cut the silence Kokoro pads every utterance with, so chunks join like one utterance;
    returns the PCM kept and where it began in `pcm` (word timings count from there).

    The model gives its start and end markers durations of their own and stretches the
    last phoneme: ~0.35 s of silence before each chunk and often as much after it, which,
    played back to back, would put a pause at every chunk boundary, mid-sentence included.
    We keep 50 ms before the voice starts and, after it stops, a pause that fits how the
    chunk ends (`_PAUSE_S`), never more than the model made; the cut edges fade over 5 ms.
    """
    if not durations or len(durations) < 3 or sum(durations) * _SAMPLES_PER_FRAME != len(pcm):
        return np.ascontiguousarray(pcm), 0  # not the layout we know: leave it as it is
    head = durations[0] * _SAMPLES_PER_FRAME  # the start marker: silence
    tail = len(pcm) - durations[-1] * _SAMPLES_PER_FRAME  # the end marker
    voiced = np.flatnonzero(np.abs(pcm[:tail]) > _SILENT)
    if voiced.size:
        head = min(head, int(voiced[0]))
        tail = min(tail, int(voiced[-1]) + 1 + int(_PAUSE_S[ending] * SAMPLE_RATE))
    head = max(0, head - int(_LEAD_S * SAMPLE_RATE))
    out = np.array(pcm[head:tail], dtype=np.float32)
    fade = min(_FADE, len(out) // 2)
    if fade:
        ramp = np.linspace(0.0, 1.0, fade, endpoint=False, dtype=np.float32)
        out[:fade] *= ramp
        out[len(out) - fade :] *= ramp[::-1]
    return out, head


class _seeded:
    """Seed torch's generators for one call and restore them afterwards (None: no-op)."""

    def __init__(self, seed: int | None, device: str) -> None:
        self._seed = seed
        self._device = device
        self._fork: Any = None

    def __enter__(self) -> None:
        if self._seed is None:
            return
        import torch

        cuda = self._device.startswith("cuda")
        self._fork = torch.random.fork_rng(
            devices=[torch.device(self._device).index or 0] if cuda else [],
            device_type="cuda",
        )
        self._fork.__enter__()
        seed = self._seed & 0xFFFF_FFFF_FFFF_FFFF
        torch.default_generator.manual_seed(seed)
        if cuda:
            torch.cuda.manual_seed(seed)

    def __exit__(self, *exc: object) -> None:
        if self._fork is not None:
            self._fork.__exit__(*exc)
            self._fork = None


class _quiet_third_party(warnings.catch_warnings):
    """Silence the deprecation noise torch, kokoro and misaki emit while loading (their
    code, not ours: weight_norm, LSTM dropout, importlib.resources.open_text, jit)."""

    def __enter__(self) -> None:
        super().__enter__()
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.nn\.utils")
        warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.nn\.modules\.rnn")
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"misaki\.")
        warnings.filterwarnings(
            "ignore", category=DeprecationWarning, module=r"(torch\.jit|curated_transformers)"
        )


def load_engine(config: EngineConfig) -> Engine:
    """Load Kokoro-82M as `config` says; ModelUnavailable (within seconds) when it cannot."""
    started = time.perf_counter()
    folder = open_model_folder(config.model_dir) if config.model_dir else fetch_model_folder()
    voices = VoiceBook(
        folder.voices, voice_map=config.voice_map, default_voice=config.default_voice
    )
    if config.default_voice not in folder.voices:
        raise ModelUnavailable(
            f"The default voice {config.default_voice!r} is not in {str(folder.root)!r}; "
            f"installed: {', '.join(folder.voices)}."
        )
    try:
        import torch

        with _quiet_third_party():
            from kokoro import KModel
    except ImportError as exc:
        raise ModelUnavailable(f"The worker needs torch and kokoro installed: {exc}") from exc
    device = resolve_device(config.device, torch)
    if config.threads:
        torch.set_num_threads(config.threads)
    try:
        with _quiet_third_party():
            model = KModel(
                repo_id="hexgrad/Kokoro-82M", config=str(folder.config), model=str(folder.weights)
            )
        model = model.to(device).eval()
    except SpeechdError:
        raise
    except Exception as exc:  # torch.load, json, a state dict that does not fit
        raise ModelUnavailable(f"Cannot load Kokoro-82M from {str(folder.root)!r}: {exc}") from exc
    engine = Engine(model, folder, voices, device)
    try:  # the default voice's G2P now, so the first request does not wait for spaCy
        engine._g2p_for(voices.language(config.default_voice))
    except InvalidRequest as exc:
        raise ModelUnavailable(
            f"The default voice {config.default_voice!r} cannot be used: {exc.message}"
        ) from exc
    if device.startswith("cuda"):
        warm_cuda(engine)
    log.info(
        "Kokoro-82M loaded from %s on %s in %.1f s (%d voices)",
        folder.root,
        device,
        time.perf_counter() - started,
        len(folder.voices),
    )
    return engine
