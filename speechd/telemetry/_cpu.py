"""The worker process's own CPU time and resident memory, from the kernel's accounting."""

from __future__ import annotations

import os

__all__ = ["cpu_seconds", "rss_bytes"]

try:
    _PAGE = os.sysconf("SC_PAGE_SIZE")
except (AttributeError, ValueError, OSError):  # not a POSIX system
    _PAGE = 0


def cpu_seconds() -> float:
    """User + system CPU seconds this process has used (all its threads)."""
    times = os.times()
    return times.user + times.system


def rss_bytes() -> int | None:
    """Resident memory of this process now (Linux `/proc/self/statm`); None elsewhere."""
    if not _PAGE:
        return None
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None
