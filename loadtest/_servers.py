"""The servers under test, started as child processes, and their memory from /proc.

`start_speechd` runs `speechd serve` (the api, its supervised worker) on a fresh data folder;
`start_naive` runs the naive baseline (`loadtest.naive_server`). Both answer `GET /readyz` with
200 once their model is loaded. `tree_rss` reads VmRSS (MiB) of a process (speechd's api) and of
its descendants (the worker), so a server started elsewhere is measured too given its pid.
"""

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ._results import Rss

__all__ = [
    "Server",
    "start_chunked",
    "start_naive",
    "start_slow_speechd",
    "start_speechd",
    "tree_rss",
]

ROOT = Path(__file__).resolve().parents[1]


def _vm_rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:  # it just ended
        pass
    return 0.0


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found += [int(child) for child in task.read_text().split()]
        except OSError:
            continue
    return found


def tree_rss(pid: int) -> Rss:
    descendants: list[int] = []
    frontier = _children(pid)
    while frontier:
        descendants += frontier
        frontier = [grandchild for child in frontier for grandchild in _children(child)]
    return Rss(_vm_rss_mib(pid), sum(_vm_rss_mib(child) for child in descendants))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Server:
    """A server this run started (or, with `process` None, one it was pointed at)."""

    name: str
    url: str
    pid: int | None = None
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    data_dir: str | None = None  # `speechd serve`'s store, when this run made it
    body: dict[str, Any] = field(default_factory=dict)  # fields every speech request adds

    def rss(self) -> Rss | None:
        return None if self.pid is None else tree_rss(self.pid)

    def wait_ready(self, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited {self.process.returncode}: {self.log()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise TimeoutError(f"{self.name} not ready after {timeout:.0f} s: {self.log()}")

    def log(self) -> str:
        if self.log_path is None:
            return ""
        return self.log_path.read_text(errors="replace")[-2000:]

    def stop(self, timeout: float = 30.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _start(name: str, argv: list[str], port: int, workdir: Path) -> Server:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPEECHD_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.setdefault("HF_HUB_OFFLINE", "1")
    log_path = workdir / f"{name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, *argv], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT
        )
    return Server(name, f"http://127.0.0.1:{port}", process.pid, process, log_path)


def _engine_flags(
    model_dir: str | None, device: str, threads: int | None, engine: str = "torch"
) -> list[str]:
    flags = ["--device", device, "--engine", engine]
    if model_dir:
        flags += ["--model-dir", model_dir]
    if threads:
        flags += ["--threads", str(threads)]
    return flags


def start_speechd(
    name: str,
    *,
    policy: str,
    model_dir: str | None,
    device: str,
    threads: int | None,
    workdir: Path,
    max_queue: int = 256,
    engine: str = "torch",
    extra: Sequence[str] = (),
) -> Server:
    """`speechd serve` with `policy` on `engine` ("torch" or "onnx"), on a fresh data folder
    under `workdir`; `extra`: more flags (`--idle-unload 3s`, say)."""
    port = _free_port()
    data = tempfile.mkdtemp(prefix=f"{name}-", dir=workdir)
    argv = ["-m", "speechd.cli", "serve", "--port", str(port), "--data-dir", data]
    argv += ["--policy", policy, "--max-queue", str(max_queue), "--log-level", "warning"]
    flags = [*_engine_flags(model_dir, device, threads, engine), *extra]
    server = _start(name, argv + flags, port, workdir)
    server.data_dir = data
    return server


@contextlib.contextmanager
def speechd_at(
    url: str | None,
    *,
    model_dir: str | None,
    device: str,
    threads: int | None,
    workdir: Path,
    extra: Sequence[str] = (),
) -> Iterator[str]:
    """`url` as it is, or the url of a `speechd serve` (deadline policy, `extra` flags)
    started for the block on a fresh data folder and stopped after it."""
    if url is not None:
        yield url
        return
    server = start_speechd(
        "speechd", policy="deadline", model_dir=model_dir, device=device, threads=threads,
        workdir=workdir, extra=extra,
    )  # fmt: skip
    try:
        server.wait_ready()
        yield server.url
    finally:
        server.stop()


def start_naive(
    name: str, *, model_dir: str | None, device: str, threads: int | None, workdir: Path
) -> Server:
    port = _free_port()
    argv = ["-m", "loadtest.naive_server", "--port", str(port)]
    return _start(name, argv + _engine_flags(model_dir, device, threads), port, workdir)


def start_slow_speechd(
    name: str,
    *,
    rtf: float,
    overhead_s: float,
    workdir: Path,
    max_queue: int = 256,
    start: str = "smooth",
    batch_curve: str = "none",
    extra: Sequence[str] = (),
) -> Server:
    """`speechd serve` (deadline policy) on the slow device's cost model (`loadtest._slow`);
    its speech requests ask for `start` (smooth: held back until they play through; "": the
    api's default, as the real-model servers are asked).
    `batch_curve` "gpu": the cost model batches as a GPU does; `extra`: more `serve` flags
    (`--max-batch 1`, `--policy fifo`)."""
    port = _free_port()
    data = tempfile.mkdtemp(prefix=f"{name}-", dir=workdir)
    argv = ["-m", "loadtest.slow_serve", "--rtf", str(rtf), "--overhead", str(overhead_s)]
    argv += ["--batch-curve", batch_curve, "--"]
    argv += ["serve", "--port", str(port), "--data-dir", data, "--max-queue", str(max_queue)]
    argv += ["--log-level", "warning", *extra]
    server = _start(name, argv, port, workdir)
    server.body = {"start": start} if start else {}
    return server


def start_chunked(
    name: str,
    *,
    workdir: Path,
    cost_model: tuple[float, float] | None = None,
    model_dir: str | None = None,
    device: str = "cpu",
    threads: int | None = None,
) -> Server:
    """The Kokoro-FastAPI-style whole-chunk baseline (`loadtest.chunked_server`), on the cost
    model of a slow device or on the real engine."""
    port = _free_port()
    argv = ["-m", "loadtest.chunked_server", "--port", str(port)]
    if cost_model is not None:
        argv += ["--cost-model", f"{cost_model[0]},{cost_model[1]}"]
    else:
        argv += _engine_flags(model_dir, device, threads)
    return _start(name, argv, port, workdir)
