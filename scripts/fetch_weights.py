"""Fetch the real Kokoro-82M weights for the model tier from the Hugging Face hub.

    python3 scripts/fetch_weights.py DIR [--voices af_heart,am_adam,...]

Fills DIR like the hexgrad/Kokoro-82M repository (config.json, kokoro-v1_0.pth, voices/*.pt)
with the voices the tests use. Standard library only, so it runs before any virtual
environment exists: `scripts/test.sh` calls it on a machine that has neither
SPEECHD_TEST_MODEL_DIR nor ../shared/kokoro-weights.

- A file already in DIR is kept (downloads go to a temporary name and are renamed when
  whole), so a second run, or a run after an interrupted one, fetches only what is missing,
  and needs no network when nothing is.
- The hub is `HF_ENDPOINT` (a mirror) or https://huggingface.co; with HF_HUB_OFFLINE set, or
  when the hub cannot be reached within `--timeout` seconds, it stops at once with one line
  saying what to set, and exit status 2.
- Files stored in Git LFS are checked against the SHA-256 the hub announces for them
  (`X-Linked-Etag`), and every file against its announced length.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from email.message import Message
from pathlib import Path
from typing import IO, Any

REPO = "hexgrad/Kokoro-82M"
REVISION = "main"
#: The voices the test suite names (the English ones it speaks with, and the languages its
#: planner and voice tests touch): the same set ../shared/kokoro-weights builds.
VOICES = (
    "af_heart", "af_bella", "af_sky", "am_adam", "am_michael", "bf_emma", "bm_george",
    "ef_dora", "ff_siwis", "hf_alpha", "if_sara", "pf_dora", "jf_alpha", "jf_gongitsune",
    "jf_nezumi", "jf_tebukuro", "jm_kumo",
)  # fmt: skip
_VOICE = re.compile(r"[a-z]{2}_[a-z]{1,32}")
_SHA256 = re.compile(r'"?([0-9a-f]{64})"?')
_CHUNK = 1 << 20

ME = "scripts/fetch_weights.py"


class Unreachable(Exception):
    """The hub could not be reached (or is not to be)."""


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Follows redirects, keeping the hub's own headers: it announces an LFS file's SHA-256
    and size on the redirect to its storage, not on the storage's answer."""

    def __init__(self) -> None:
        self.first: Message | None = None

    def redirect_request(
        self, req: Any, fp: IO[bytes], code: int, msg: str, headers: Message, newurl: str
    ) -> Any:
        if self.first is None and headers.get("X-Linked-Etag"):
            self.first = headers
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def _url(path: str) -> str:
    return f"{_endpoint()}/{REPO}/resolve/{REVISION}/{urllib.parse.quote(path)}"


def _fetch(path: str, dest: Path, timeout: float) -> int:
    """Download `path` of the repository to `dest`; its size in bytes."""
    redirects = _Redirects()
    opener = urllib.request.build_opener(redirects)
    request = urllib.request.Request(_url(path), headers={"User-Agent": "speechd-tests"})
    try:
        response = opener.open(request, timeout=timeout)
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"{_url(path)} answered {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise Unreachable(str(getattr(exc, "reason", exc))) from exc
    announced = redirects.first or response.headers
    sha = _SHA256.fullmatch(announced.get("X-Linked-Etag") or "")
    size = announced.get("X-Linked-Size") or response.headers.get("Content-Length")
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(f".{dest.name}.part")
    digest = hashlib.sha256()
    written = 0
    try:
        with response, open(partial, "wb") as out:
            while block := response.read(_CHUNK):
                out.write(block)
                digest.update(block)
                written += len(block)
        if size is not None and size.isdigit() and int(size) != written:
            raise RuntimeError(f"{path}: {written} bytes arrived of {size}")
        if sha and digest.hexdigest() != sha.group(1):
            raise RuntimeError(f"{path}: SHA-256 {digest.hexdigest()} is not the hub's {sha[1]}")
        partial.replace(dest)
    finally:
        partial.unlink(missing_ok=True)
    return written


def _wanted(voices: list[str]) -> list[str]:
    return ["config.json", "kokoro-v1_0.pth", *(f"voices/{v}.pt" for v in voices)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path, help="the model folder to fill")
    parser.add_argument(
        "--voices", default=",".join(VOICES), help="comma-separated voices (the tests' set)"
    )
    parser.add_argument("--timeout", type=float, default=15.0, help="seconds per connection")
    args = parser.parse_args(argv)
    voices = [v.strip() for v in args.voices.split(",") if v.strip()]
    if not voices or not all(_VOICE.fullmatch(v) for v in voices):
        parser.error("--voices: names like af_heart, separated by commas")
    missing = [p for p in _wanted(voices) if not (args.dir / p).is_file()]
    if not missing:
        return 0
    advice = (
        "set SPEECHD_TEST_MODEL_DIR to a folder laid out like hexgrad/Kokoro-82M "
        "(config.json, kokoro-v1_0.pth, voices/*.pt), or HF_ENDPOINT to a reachable mirror"
    )
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        print(f"{ME}: no Kokoro-82M weights and HF_HUB_OFFLINE is set: {advice}", file=sys.stderr)
        return 2
    total = 0
    for path in missing:
        try:
            total += _fetch(path, args.dir / path, args.timeout)
        except Unreachable as exc:
            print(
                f"{ME}: no Kokoro-82M weights and {_endpoint()} cannot be reached ({exc}): "
                f"{advice}",
                file=sys.stderr,
            )
            return 2
        except (RuntimeError, OSError) as exc:
            print(f"{ME}: {exc}", file=sys.stderr)
            return 1
    (args.dir / "SOURCE.txt").write_text(
        f"Kokoro-82M ({REPO}@{REVISION}, Apache-2.0 by hexgrad) from {_endpoint()}\n"
        f"voices: {', '.join(voices)}\n"
    )
    print(f"{ME}: {len(missing)} files ({total / 2**20:.0f} MiB) from {_endpoint()} in {args.dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
