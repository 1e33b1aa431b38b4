"""Voice names, OpenAI aliases and blends, resolved without torch.

A *voice spec* is the canonical string the rest of speechd stores and hashes:

    af_heart                          one installed voice
    af_bella(0.667)+af_sky(0.333)     a blend: weights in thousandths summing to exactly 1,
                                      heaviest first (ties keep the order they were written)

`VoiceBook.resolve` turns what a caller sent (`nova`, `af_bella+af_sky`,
`af_bella(2) + af_sky(1)`, `AF_HEART`) into that form, so equal requests get equal specs and
thus equal cast ids, and re-resolving a spec returns it unchanged. The language of a spec is
the prefix letter of its first (heaviest) voice.
"""

from __future__ import annotations

import math
import string
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

from speechd.errors import UnknownVoice
from speechd.limits import MAX_BLEND_VOICES, MAX_VOICE_CHARS
from speechd.text import LANGUAGES

__all__ = ["VoiceBook", "installed_voices", "parse_spec"]

MAX_BLEND: Final = MAX_BLEND_VOICES
"""Blends of more voices than this are refused (each one is a 0.5 MB tensor to average)."""
_SCALE: Final = 1000  # weights are kept in thousandths
_NAME_START: Final = frozenset(string.ascii_letters + string.digits)
_NAME_CHARS: Final = _NAME_START | {"_", "-"}
_DIGITS: Final = frozenset(string.digits)


def _is_name(text: str) -> bool:
    """`[A-Za-z0-9][A-Za-z0-9_-]*`, checked character by character."""
    return bool(text) and text[0] in _NAME_START and all(c in _NAME_CHARS for c in text)


def installed_voices(model_dir: str | Path) -> list[str]:
    """Names of the voice packs in `model_dir/voices/*.pt`, sorted (no torch needed)."""
    folder = Path(model_dir) / "voices"
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.glob("*.pt") if _is_name(p.stem))


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def _term(part: str) -> tuple[str, float]:
    """One blend term, `name` or `name(weight)` with optional spaces around each piece: one
    pass over `part`, each character looked at once."""
    i = _skip_space(part, 0)
    start = i
    if i < len(part) and part[i] in _NAME_START:
        i += 1
        while i < len(part) and part[i] in _NAME_CHARS:
            i += 1
    if i == start:
        raise ValueError("a voice term needs a name")
    name = part[start:i]
    weight = 1.0
    i = _skip_space(part, i)
    if i < len(part) and part[i] == "(":
        i = _skip_space(part, i + 1)
        start = i
        while i < len(part) and (part[i] in _DIGITS or part[i] == "."):
            i += 1
        number = part[start:i]
        # As `[0-9]*\.?[0-9]+`: at most one dot, and a digit after it.
        if number.count(".") > 1 or not number or number[-1] not in _DIGITS:
            raise ValueError("a voice weight is a number like 2 or 0.5")
        weight = float(number)
        i = _skip_space(part, i)
        if i >= len(part) or part[i] != ")":
            raise ValueError("a voice weight ends with ')'")
        i = _skip_space(part, i + 1)
    if i != len(part):
        raise ValueError("unexpected characters after a voice term")
    if not (math.isfinite(weight) and weight > 0):
        raise ValueError("voice weight must be positive")
    return name, weight


def parse_spec(spec: str) -> list[tuple[str, float]]:
    """Split `a(2)+b` into `[("a", 2.0), ("b", 1.0)]`; ValueError when malformed.

    Bounded before any parsing: at most `MAX_VOICE_CHARS` characters and `MAX_BLEND` terms
    (its `+` are counted first); then one linear pass over each term.
    """
    if len(spec) > MAX_VOICE_CHARS:
        raise ValueError(f"a voice is at most {MAX_VOICE_CHARS} characters")
    if spec.count("+") >= MAX_BLEND:
        raise ValueError(f"a blend holds at most {MAX_BLEND} voices")
    return [_term(part) for part in spec.split("+")]


def _thousandths(weights: list[float]) -> list[int]:
    """Largest-remainder rounding of weights to integers summing to exactly `_SCALE`."""
    total = sum(weights)
    exact = [w * _SCALE / total for w in weights]
    floors = [math.floor(x) for x in exact]
    order = sorted(range(len(exact)), key=lambda i: (floors[i] - exact[i], i))
    for i in order[: _SCALE - sum(floors)]:
        floors[i] += 1
    return floors


def _format(blend: list[tuple[str, int]]) -> str:
    if len(blend) == 1:
        return blend[0][0]
    return "+".join(f"{name}({w / _SCALE:.3f}".rstrip("0").rstrip(".") + ")" for name, w in blend)


class VoiceBook:
    """The voices one model folder offers, plus the configured aliases (OpenAI's names).

    Torch-free: built from `installed_voices(model_dir)` and the engine config, so the api
    can validate a request's voice before it is queued.
    """

    def __init__(
        self,
        installed: Iterable[str],
        *,
        voice_map: Mapping[str, str],
        default_voice: str,
    ) -> None:
        self.installed: list[str] = sorted(set(installed))
        self._by_lower = {name.lower(): name for name in self.installed}
        self._aliases = {alias.lower(): target for alias, target in voice_map.items()}
        self.aliases: list[str] = sorted(self._aliases)
        self.default_voice = default_voice

    def __repr__(self) -> str:
        return f"VoiceBook({len(self.installed)} voices, default={self.default_voice!r})"

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        try:
            self.resolve(name)
        except UnknownVoice:
            return False
        return True

    def resolve(self, name: str) -> str:
        """The canonical spec for a voice name, alias or blend; UnknownVoice otherwise."""
        try:
            terms = parse_spec(name)
        except ValueError:
            raise self._unknown(name) from None
        weights: dict[str, float] = {}
        for term, weight in terms:
            parts = self._expand(term, name)
            total = sum(w for _, w in parts)
            for voice, w in parts:
                weights[voice] = weights.get(voice, 0.0) + weight * w / total
        names = list(weights)
        scaled = _thousandths([weights[n] for n in names])
        blend = [(n, w) for n, w in zip(names, scaled, strict=True) if w > 0]
        if len(blend) > MAX_BLEND:  # aliases that are blends themselves add voices
            raise self._unknown(name)
        blend.sort(key=lambda item: -item[1])  # stable: equal weights keep written order
        return _format(blend)

    def language(self, spec: str) -> str:
        """The language code (a, b, e, f, h, i, j, p, z) of a spec: its first voice's prefix.

        Voices whose name starts with another letter (custom packs) are read as American
        English.
        """
        first = parse_spec(self.resolve(spec))[0][0]
        letter = first[:1].lower()
        return letter if letter in LANGUAGES else "a"

    def weights(self, spec: str) -> list[tuple[str, float]]:
        """The installed voices of a spec and their weights (summing to 1)."""
        return [(n, w) for n, w in parse_spec(self.resolve(spec))]

    def _expand(self, term: str, asked: str) -> list[tuple[str, float]]:
        installed = self._by_lower.get(term.lower())
        if installed is not None:
            return [(installed, 1.0)]
        target = self._aliases.get(term.lower())
        if target is None:
            raise self._unknown(asked)
        for candidate in (target, self.default_voice):
            try:
                terms = parse_spec(candidate)
            except ValueError:
                continue
            found = [(self._by_lower.get(n.lower()), w) for n, w in terms]
            if all(n is not None for n, _ in found):
                return [(n, w) for n, w in found if n is not None]
        raise self._unknown(asked)

    def _unknown(self, name: str) -> UnknownVoice:
        return UnknownVoice(name, [*self.installed, *self.aliases])
