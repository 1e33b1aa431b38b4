"""Running the `speechd-client` command as a user would, and reading the audio it writes."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import av

from harness.servers import ROOT

__all__ = [
    "Run",
    "audio_of",
    "cli_env",
    "run_cli",
    "run_cli_on_terminal",
]

CLI = [sys.executable, "-m", "speechd_client"]


def cli_env(url: str | None, key: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPEECHD_")}
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{ROOT / 'clients'}"
    env["COLUMNS"] = "200"
    if url is not None:
        env["SPEECHD_URL"] = url
    if key is not None:
        env["SPEECHD_API_KEY"] = key
    return env


@dataclass
class Run:
    code: int
    stdout: bytes
    stderr: str

    @property
    def error_line(self) -> str:
        """The one line an error prints (and a check that it is one line, no traceback)."""
        lines = self.stderr.splitlines()
        assert len(lines) == 1 and "Traceback" not in self.stderr, self.stderr
        return lines[0]


def run_cli(
    *args: str,
    url: str | None,
    key: str | None = None,
    stdin: bytes | None = None,
    cwd: Path | None = None,
    timeout: float = 120,
) -> Run:
    """Run the command with stdin, stdout and stderr all pipes (not terminals)."""
    done = subprocess.run(
        [*CLI, *args],
        input=stdin if stdin is not None else b"",
        capture_output=True,
        env=cli_env(url, key),
        cwd=cwd,
        timeout=timeout,
    )
    return Run(done.returncode, done.stdout, done.stderr.decode(errors="replace"))


def _drain(fd: int, into: list[bytes]) -> None:
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO: every writer of the terminal has gone
            return
        if not data:
            return
        into.append(data)


def run_cli_on_terminal(
    *args: str, url: str, key: str | None = None, stdout_too: bool = False, timeout: float = 120
) -> Run:
    """Run the command with stdin and stderr (and, with `stdout_too`, stdout) on a
    pseudo-terminal; what the terminal showed comes back as `stderr`."""
    main, side = pty.openpty()
    received: list[bytes] = []
    reader = threading.Thread(target=_drain, args=(main, received), daemon=True)
    reader.start()
    try:
        process = subprocess.Popen(
            [*CLI, *args],
            stdin=side,
            stdout=side if stdout_too else subprocess.PIPE,
            stderr=side,
            env=cli_env(url, key),
        )
        os.close(side)
        stdout, _ = process.communicate(timeout=timeout)
        reader.join(10)
    finally:
        os.close(main)
    return Run(process.returncode, stdout or b"", b"".join(received).decode(errors="replace"))


def audio_of(data: bytes) -> tuple[int, float]:
    """(sample rate, seconds) of an audio file, decoded in full: it must be a whole file."""
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        samples = sum(frame.samples for frame in container.decode(stream))
        rate = stream.codec_context.sample_rate
    return rate, samples / rate
