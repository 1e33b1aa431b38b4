"""The engine's public surface, and the promise that importing it stays torch-free."""

from __future__ import annotations

import subprocess
import sys
import types

import speechd.engine as engine


def test_all_lists_exactly_the_public_names() -> None:
    public = {
        name
        for name, value in vars(engine).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name != "annotations"
    }
    assert set(engine.__all__) == public


def test_public_objects_claim_the_package_as_their_module() -> None:
    for name in engine.__all__:
        value = getattr(engine, name)
        if isinstance(value, type) or callable(value):
            assert value.__module__ == "speechd.engine", name


def test_importing_the_engine_loads_no_torch_kokoro_or_g2p() -> None:
    code = (
        "import sys, speechd.engine as e\n"
        "e.VoiceBook(['af_heart'], voice_map=e.DEFAULT_VOICE_MAP, default_voice='af_heart')"
        ".resolve('nova')\n"
        "from speechd.text._slices import normalize_text\n"
        "normalize_text('Hello, **world** at 3:30pm!')\n"
        "heavy = [m for m in ('torch', 'kokoro', 'misaki', 'spacy', 'transformers')"
        " if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
