"""The client's public surface, and its independence from the server package."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
import types

import speechd_client
from harness.servers import ROOT, free_port


def test_all_lists_exactly_the_public_names() -> None:
    exported = speechd_client.__all__
    assert len(set(exported)) == len(exported)
    public = {
        name
        for name, value in vars(speechd_client).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public - {"annotations"} == set(exported)
    for name in exported:  # each shows as the package's own
        value = getattr(speechd_client, name)
        if isinstance(value, type):
            assert value.__module__ == "speechd_client", name


def test_modules_are_private() -> None:
    names = [m.name for m in pkgutil.iter_modules(speechd_client.__path__)]
    assert names and all(name.startswith("_") for name in names)


def test_the_client_runs_without_the_server_package() -> None:
    # Only clients/ on the path: importing speechd (or torch) would fail, so it must not.
    script = (
        "import sys, speechd_client._cli as cli\n"
        "code = cli.main(['--url', sys.argv[1], 'voices'])\n"
        "assert not {'speechd', 'torch', 'litestar'} & set(sys.modules), sys.modules\n"
        "sys.exit(code)\n"
    )
    url = f"http://127.0.0.1:{free_port()}"
    done = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(ROOT / 'clients')!r})\n"
         + script, url],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith(f"speechd-client: speechd is not reachable at {url}")
