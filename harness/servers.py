"""A live `speechd` server process on loopback (its worker: `harness.workers.worker_process`)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

__all__ = ["ROOT", "LiveServer", "free_port", "start_server", "wait_until"]

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPEECHD_")}
    env["PYTHONPATH"] = str(ROOT)
    env["HF_HUB_OFFLINE"] = "1"
    env.update(extra or {})
    return env


def wait_until(check, timeout: float, what: str, interval: float = 0.1) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout} s waiting for {what}")


@dataclass
class LiveServer:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def v1(self) -> str:
        return self.url + "/v1"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


@contextlib.contextmanager
def start_server(
    args: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    ready: bool = True,
    timeout: float = 30.0,
    module: str = "speechd",
) -> Iterator[LiveServer]:
    """Run `speechd ARGS --port P`; wait for /healthz (and /readyz if `ready`)."""
    port = free_port()
    with tempfile.NamedTemporaryFile("wb", prefix="speechd-", suffix=".log", delete=False) as log:
        process = subprocess.Popen(
            [sys.executable, "-m", module, *args, "--port", str(port)],
            cwd=ROOT,
            env=_env(env),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    live = LiveServer(f"http://127.0.0.1:{port}", process, Path(log.name))
    try:

        def up() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"speechd exited with {process.returncode}:\n{live.log()}")
            return _answers(live.url + ("/readyz" if ready else "/healthz"))

        wait_until(up, timeout, "the server")
        yield live
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        live.log_path.unlink(missing_ok=True)
