"""A tiny, randomly initialised Kokoro model folder (the real code path, fast; its audio is
noise), its ONNX export, and the fixtures every suite that loads an engine shares
(`tiny_model_dir`, and `tiny_engine`: the tiny model on torch, whose planner is the real front
end's). Registered for every test by tests/conftest.py; tests/engine/conftest.py adds the ONNX
Runtime engine."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from speechd.engine import Engine, EngineConfig, load_engine

#: Phoneme symbols misaki and espeak emit, plus punctuation: the tiny model's vocabulary.
_SYMBOLS = (
    ';:,.!?\u2014\u2026"()\u201c\u201d '
    "AIOQWYabdefhijklmnopqrstuvwxyz"
    "\u00e6\u00e7\u00f0\u00f8\u014b\u0153\u0250\u0251\u0252\u0254\u0255\u0259\u025a\u025b"
    "\u025c\u025f\u0261\u0263\u0265\u0268\u026a\u026d\u026f\u0272\u0273\u0274\u0279\u027e"
    "\u0281\u0282\u0283\u028a\u028b\u028c\u028e\u028f\u0292\u0294\u029d\u02a4\u02a7\u02a6"
    "\u02a3\u02c8\u02cc\u02d0\u03b2\u03b8\u1d4a\u1d7b\u0303"
)

TINY_CONFIG = {
    "istftnet": {
        "upsample_kernel_sizes": [20, 12],
        "upsample_rates": [10, 6],
        "gen_istft_hop_size": 5,
        "gen_istft_n_fft": 20,
        "resblock_dilation_sizes": [[1, 3, 5]],
        "resblock_kernel_sizes": [3],
        "upsample_initial_channel": 512,
    },
    "dim_in": 64,
    "dropout": 0.2,
    "hidden_dim": 512,
    "max_conv_dim": 512,
    "max_dur": 1,  # a random model then speaks ~1 frame per phoneme: short, fast audio
    "multispeaker": True,
    "n_layer": 1,
    "n_mels": 80,
    "n_token": 178,
    "style_dim": 128,
    "text_encoder_kernel_size": 5,
    "plbert": {
        "hidden_size": 32,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "max_position_embeddings": 512,
        "num_hidden_layers": 1,
        "dropout": 0.1,
    },
    "vocab": {c: i + 1 for i, c in enumerate(dict.fromkeys(_SYMBOLS))},
}
TINY_VOICES = ("af_heart", "af_bella", "af_sky", "am_adam", "bf_emma", "ff_siwis", "jf_alpha")


def make_tiny_model_dir(root: Path, voices: tuple[str, ...] = TINY_VOICES) -> Path:
    """A folder laid out like hexgrad/Kokoro-82M: config.json, the weights of a KModel
    initialised at random from a fixed seed (saved, so that every runtime and every process
    loads the same model; ~235 MB, the decoder's size is fixed by kokoro's code) and random
    voice packs shaped like the real ones."""
    import torch

    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(TINY_CONFIG, ensure_ascii=False))
    _tiny_weights(root / "kokoro-v1_0.pth")
    (root / "voices").mkdir(exist_ok=True)
    generator = torch.Generator().manual_seed(7)
    packs = {name: torch.randn(510, 1, 256, generator=generator) * 0.1 for name in voices}
    if {"af_bella", "af_sky"} <= packs.keys():  # a ready-made blend, to check blending against
        packs["af_mix"] = 0.25 * packs["af_bella"] + 0.75 * packs["af_sky"]
    for name, pack in packs.items():
        torch.save(pack, root / "voices" / f"{name}.pt")
    return root


_WEIGHTS: dict[str, bytes] = {}


def _tiny_weights(path: Path) -> None:
    """The tiny model's state dict (made once per test session, then copied)."""
    import io

    import torch

    from speechd.engine._torch import quiet_third_party

    if "tiny" not in _WEIGHTS:
        with quiet_third_party():
            from kokoro import KModel

            with torch.random.fork_rng():
                torch.manual_seed(0)
                empty = path.with_suffix(".empty")
                torch.save({}, empty)  # nothing to load: KModel keeps its initialisation
                model = KModel(
                    repo_id="hexgrad/Kokoro-82M",
                    config=dict(TINY_CONFIG),
                    model=str(empty),
                )
                empty.unlink()
        buffer = io.BytesIO()
        torch.save({name: getattr(model, name).state_dict() for name in _PARTS}, buffer)
        _WEIGHTS["tiny"] = buffer.getvalue()
    path.write_bytes(_WEIGHTS["tiny"])


_PARTS = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")


def export_tiny(root: Path) -> Path:
    """The ONNX export of a tiny model folder, made in this process (a child process, as the
    engine makes it, would import torch and kokoro again) where the engine looks for it."""
    from speechd.engine import _export
    from speechd.engine._files import open_model_folder
    from speechd.engine._trace import export_graphs

    folder = open_model_folder(root)
    target = root / _export.FOLDER / _export.export_key(folder)
    if not (target / _export.MANIFEST).is_file():
        target.mkdir(parents=True, exist_ok=True)
        export_graphs(folder.config, folder.weights, target)
    return target


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model_dir(tmp_path_factory.mktemp("kokoro-tiny"))


@pytest.fixture(scope="session")
def tiny_engine(tiny_model_dir: Path) -> Iterator[Engine]:
    """The tiny model on torch."""
    yield load_engine(EngineConfig(model_dir=str(tiny_model_dir), device="cpu", engine="torch"))
