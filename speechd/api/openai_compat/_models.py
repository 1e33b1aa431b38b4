"""The model names speechd answers to. All are Kokoro-82M: OpenAI's names are aliases, so a
client written for OpenAI works unchanged, and the same text in `tts-1` and `kokoro` is the
same cast."""

from __future__ import annotations

from speechd.errors import ModelNotFound
from speechd.service import MODEL

__all__ = ["MODEL_NAMES", "resolve_model"]

MODEL_NAMES = (MODEL, "tts-1", "tts-1-hd", "gpt-4o-mini-tts", "gpt-4o-mini-tts-2025-12-15")
"""Accepted `model` values; the first is speechd's own name."""


def resolve_model(name: str | None) -> str:
    """The model a request's `model` names (default Kokoro); `ModelNotFound` if unknown."""
    if name is None or name in MODEL_NAMES:
        return MODEL
    shown = name if len(name) <= 80 else name[:80] + "…"  # the message stays short
    raise ModelNotFound(
        f"The model {shown!r} does not exist. Available models: {', '.join(MODEL_NAMES)}.",
        param="model",
    )
