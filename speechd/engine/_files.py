"""Where the weights come from: a local folder shaped like hexgrad/Kokoro-82M, or the Hub.

    <model_dir>/config.json          model hyper-parameters and the phoneme vocabulary
    <model_dir>/kokoro-v1_0.pth      KModel state dict (any single *.pth is accepted)
    <model_dir>/voices/<name>.pt     voice packs, float32 tensors shaped (510, 1, 256)

Without a folder the same layout is fetched from the Hugging Face Hub through
huggingface_hub's cache. Offline (or with the Hub unreachable) that fails within seconds with
ModelUnavailable saying which setting to use instead; nothing here waits on retries.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from speechd.errors import ModelUnavailable

from ._voices import installed_voices

__all__ = ["REPO_ID", "ModelFolder", "fetch_model_folder", "open_model_folder"]

REPO_ID: Final = "hexgrad/Kokoro-82M"
CONFIG_FILE: Final = "config.json"
WEIGHTS_FILE: Final = "kokoro-v1_0.pth"
VOICES_DIR: Final = "voices"
#: Longest wait for the Hub to answer the first (small) request before giving up.
PROBE_TIMEOUT_S: Final = 8.0
_HOW_TO: Final = (
    "Set --model-dir (or SPEECHD_MODEL_DIR) to a local folder laid out like "
    f"{REPO_ID} (config.json, {WEIGHTS_FILE}, voices/*.pt)."
)


@dataclass(frozen=True)
class ModelFolder:
    root: Path
    config: Path
    weights: Path
    voices: list[str]

    def voice_path(self, name: str) -> Path:
        return self.root / VOICES_DIR / f"{name}.pt"


def open_model_folder(path: str | Path) -> ModelFolder:
    """Check a local model folder; ModelUnavailable naming what is missing."""
    root = Path(path).expanduser()
    if not root.is_dir():
        raise ModelUnavailable(f"Model folder {str(root)!r} does not exist. {_HOW_TO}")
    config = root / CONFIG_FILE
    weights = root / WEIGHTS_FILE
    if not weights.is_file():
        candidates = sorted(root.glob("*.pth"))
        weights = candidates[0] if len(candidates) == 1 else weights
    voices = installed_voices(root)
    missing = [
        what
        for what, ok in (
            (CONFIG_FILE, config.is_file()),
            (WEIGHTS_FILE, weights.is_file()),
            (f"{VOICES_DIR}/*.pt", bool(voices)),
        )
        if not ok
    ]
    if missing:
        raise ModelUnavailable(f"Model folder {str(root)!r} lacks {', '.join(missing)}. {_HOW_TO}")
    return ModelFolder(root=root, config=config, weights=weights, voices=voices)


def fetch_model_folder(repo_id: str = REPO_ID) -> ModelFolder:
    """The Hub copy of the model: from huggingface_hub's cache when complete, else
    downloaded (once) after a quick check that the Hub answers at all."""
    from huggingface_hub import constants, snapshot_download

    patterns = [CONFIG_FILE, WEIGHTS_FILE, f"{VOICES_DIR}/*.pt"]
    with contextlib.suppress(Exception):  # not cached (or only partly): go on below
        return open_model_folder(
            snapshot_download(repo_id, allow_patterns=patterns, local_files_only=True)
        )
    if constants.HF_HUB_OFFLINE:
        raise ModelUnavailable(
            f"{repo_id} is not in the Hugging Face cache and HF_HUB_OFFLINE is set. {_HOW_TO}"
        )
    _probe(f"{constants.ENDPOINT}/{repo_id}/resolve/main/{CONFIG_FILE}")
    try:
        root = snapshot_download(repo_id, allow_patterns=patterns)
    except Exception as exc:  # huggingface_hub raises OSError, httpx and HfHubHTTPError kinds
        raise ModelUnavailable(f"Downloading {repo_id} failed: {exc}. {_HOW_TO}") from exc
    return open_model_folder(root)


def _probe(url: str) -> None:
    """One HEAD request, no retries (huggingface_hub backs off for ~30 s on a refused
    connection), under a deadline of our own that also covers a hanging DNS lookup."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            import httpx

            response = httpx.head(url, timeout=PROBE_TIMEOUT_S / 2)
            if response.status_code >= 400:  # a redirect to the CDN is fine
                response.raise_for_status()
        except Exception as exc:
            failure.append(exc)

    thread = threading.Thread(target=run, name="speechd-hub-probe", daemon=True)
    thread.start()
    thread.join(PROBE_TIMEOUT_S)
    if thread.is_alive():
        raise ModelUnavailable(
            f"The Hugging Face Hub did not answer within {PROBE_TIMEOUT_S:.0f} s. {_HOW_TO}"
        )
    if failure:
        raise ModelUnavailable(
            f"Cannot reach the Hugging Face Hub ({type(failure[0]).__name__}: {failure[0]}). "
            f"{_HOW_TO}"
        ) from failure[0]
