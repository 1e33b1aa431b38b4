"""The add-on's run script: the Supervisor's options file (/data/options.json) as
`speechd serve` flags, the Wyoming server on port 10200, and the Supervisor told where it
listens, so Home Assistant offers to add it (Wyoming discovery).

Every option maps to the flag of the same name (docs/serving/flags.md); those left empty are
not passed, so speechd's defaults hold. The store and the model cache are in /data, which the
Supervisor keeps across restarts and updates (the cache is left out of backups).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import urllib.request

OPTIONS = "/data/options.json"
WYOMING_PORT = 10200
#: option -> flag; a list option repeats its flag.
FLAGS = {
    "voice": "--default-voice",
    "engine": "--engine",
    "log_level": "--log-level",
    "api_keys": "--api-key",
    "threads": "--threads",
    "idle_unload": "--idle-unload",
    "retention": "--retention",
    "max_queue": "--max-queue",
    "model_dir": "--model-dir",
    "lexicon": "--lexicon",
    "public_url": "--public-url",
}
DISCOVERY_WAIT_S = 3600.0  # the first start may fetch the weights and export them


def say(line: str) -> None:
    print(f"speechd-addon: {line}", file=sys.stderr, flush=True)


def command(options: dict[str, object]) -> list[str]:
    argv = ["speechd", "serve", "--wyoming-uri", f"tcp://0.0.0.0:{WYOMING_PORT}"]
    for name, flag in FLAGS.items():
        value = options.get(name)
        values = value if isinstance(value, list) else [value]
        argv += [part for v in values if v not in (None, "") for part in (flag, str(v))]
    return argv


def discover() -> None:
    """Tell the Supervisor where the Wyoming server is, once it listens."""
    token = os.environ.get("SUPERVISOR_TOKEN")
    if not token:
        say("not run by the Supervisor (no SUPERVISOR_TOKEN): no discovery")
        return
    deadline = time.monotonic() + DISCOVERY_WAIT_S
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", WYOMING_PORT), timeout=2).close()
            break
        except OSError:
            time.sleep(1)
    body = {"service": "wyoming", "config": {"uri": f"tcp://{socket.gethostname()}:{WYOMING_PORT}"}}
    request = urllib.request.Request(
        "http://supervisor/discovery",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            say(f"discovery sent to the Supervisor ({response.status})")
    except OSError as exc:
        say(f"discovery failed: {exc}")


def main() -> None:
    try:
        with open(OPTIONS, encoding="utf-8") as file:
            options = json.load(file)
    except FileNotFoundError:
        options = {}
    argv = command(options)
    # The discovery in a grandchild, which tini (PID 1) reaps; this process becomes speechd.
    child = os.fork()
    if child == 0:
        if os.fork() == 0:
            discover()
        os._exit(0)
    os.waitpid(child, 0)
    shown = [
        "***" if prev == "--api-key" else a for prev, a in zip(["", *argv[:-1]], argv, strict=True)
    ]
    say(" ".join(shown))
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main()
