"""The Python packages an image installs before speechd itself, read from pyproject.toml.

    python3 requirements.py PYPROJECT [EXTRA ...] [--without-torch]

Prints speechd's runtime dependencies and the named extras, one per line, torch left out:
each image installs its own torch first (the CPU wheel, a CUDA wheel, or NVIDIA's on a
Jetson). The images install these in a layer of their own, before speechd's source is copied
in, so a change to the code rebuilds only the last, small layer.

`--without-torch` is the torch-free runtime (ONNX Runtime only): kokoro (which needs torch)
is left out too, and misaki's English extra is listed without spacy-curated-transformers,
the one package of it that needs torch (speechd's G2P never uses it; speechd/engine/_engine.py
keeps it from being imported); huggingface-hub, which kokoro brought, is listed for the
weights' first fetch.
"""

from __future__ import annotations

import re
import sys

try:
    import tomllib  # novermin (3.11+; the fallback below is for a Jetson's 3.10)
except ModuleNotFoundError:
    import tomli as tomllib

#: misaki[en]'s own requirements but spacy-curated-transformers (misaki 0.9.4's metadata).
MISAKI_EN = ("num2words", "spacy", "phonemizer-fork", "espeakng-loader")
#: What kokoro brought that speechd itself uses: the Hub client (speechd/engine/_files.py).
FROM_KOKORO = ("huggingface-hub",)


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower()


def requirements(pyproject: str, extras: list[str], *, with_torch: bool = True) -> list[str]:
    with open(pyproject, "rb") as file:
        project = tomllib.load(file)["project"]
    wanted = list(project["dependencies"])
    for extra in extras:
        wanted += project["optional-dependencies"][extra]
    dropped = {"torch"} if with_torch else {"torch", "kokoro"}
    found = []
    for requirement in wanted:
        name = _name(requirement)
        if name in dropped:
            if name == "kokoro" and not with_torch:
                found.extend(FROM_KOKORO)
            continue
        if not with_torch and name == "misaki":
            found.append(re.sub(r"\[[^\]]*\]", "", requirement, count=1))
            found.extend(MISAKI_EN)
            continue
        found.append(requirement)
    return found


def main(argv: list[str]) -> int:
    with_torch = "--without-torch" not in argv
    args = [a for a in argv if a != "--without-torch"]
    if not args:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    print("\n".join(requirements(args[0], args[1:], with_torch=with_torch)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
