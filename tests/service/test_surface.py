"""`speechd.service`'s public surface is exactly its `__all__`, and it needs neither torch nor
the web framework (the Wyoming door and the api both use it)."""

from __future__ import annotations

import subprocess
import sys
import types

import speechd.service
from harness.servers import ROOT


def test_all_lists_exactly_the_public_names() -> None:
    exported = speechd.service.__all__
    assert len(set(exported)) == len(exported)
    public = {
        name
        for name, value in vars(speechd.service).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public - {"annotations"} == set(exported)


def test_importing_it_loads_no_torch_and_no_litestar() -> None:
    script = (
        "import sys, speechd.service\n"
        "heavy = {'torch', 'litestar', 'kokoro'} & {m.split('.')[0] for m in sys.modules}\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
