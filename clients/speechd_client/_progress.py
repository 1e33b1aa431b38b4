"""A one-line progress display for a terminal: a queued cast's place in line and estimated
start, then chunks done of planned, audio seconds made, the listener's lead (or, while a
cast slower than real time holds its listeners back, when they start), bytes received.
It redraws in place, so it is only for a TTY; the CLI makes none when stderr is piped."""

from __future__ import annotations

import shutil
import time
from typing import TextIO

from ._wire import CastView, Progress

__all__ = ["ProgressBar"]

_BAR = 20
_REDRAW_S = 0.1


def _size(n: int) -> str:
    if n < 1024 * 1024:
        return f"{n / 1024:.0f} KiB"
    return f"{n / (1024 * 1024):.1f} MiB"


def _queued(progress: Progress, status: str = "queued") -> str:
    """`queued` (or `loading the model`), with the place in line and the estimated start when
    the server knows them."""
    ahead = progress.queue_position
    text = "loading the model" if status == "loading" else "queued"
    if ahead is not None:
        text += ", next" if ahead == 0 else f", {ahead} ahead"
    starts = progress.starts_in_seconds
    if starts is not None:
        text += f", starts in ~{starts:.0f} s" if starts >= 1 else ", starts now"
    return text


class ProgressBar:
    """Call `received` for each piece of audio and `cast` with each status read; `close` draws
    the last state and ends the line."""

    def __init__(self, out: TextIO, label: str) -> None:
        self._out = out
        self._label = label
        self._bytes = 0
        self._view: CastView | None = None
        self._drawn = 0.0

    def received(self, size: int) -> None:
        self._bytes += size
        self._draw()

    def cast(self, view: CastView) -> None:
        self._view = view
        self._draw()

    def close(self, view: CastView | None = None) -> None:
        if view is not None:
            self._view = view
        self._draw(force=True)
        self._out.write("\n")
        if self._view is not None:
            self._out.write(f"cast: {self._view.url}\n")
        self._out.flush()

    def line(self) -> str:
        parts = [self._label]
        view = self._view
        if view is not None:
            progress = view.progress
            done, planned = progress.chunks_done, progress.chunks_planned
            if view.status in ("queued", "loading"):
                parts.append(_queued(progress, view.status))
            elif planned:
                filled = round(_BAR * min(done, planned) / planned)
                parts.append(f"[{'#' * filled}{'.' * (_BAR - filled)}] {done}/{planned} chunks")
            else:
                parts.append(f"{done} chunks")
            parts.append(f"{progress.audio_seconds:.1f} s audio")
            plays_in = progress.plays_in_seconds
            if plays_in is not None and view.status == "generating":
                parts.append(f"plays in ~{plays_in:.0f} s (held back to play through)")
            elif progress.lead_seconds is not None and view.status == "generating":
                parts.append(f"lead {progress.lead_seconds:+.1f} s")
            if view.status in ("done", "failed"):
                parts.append(view.status)
        parts.append(_size(self._bytes))
        return "  ".join(parts)

    def _draw(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._drawn < _REDRAW_S:
            return
        self._drawn = now
        # A line longer than the terminal would wrap, and "\r" would redraw only its tail.
        width = shutil.get_terminal_size().columns - 1
        self._out.write("\r" + self.line()[:width] + "\x1b[K")
        self._out.flush()
