"""Giving the CPU engine's freed memory back to the system: `HeapTrimmer`.

On CPU every chunk's activations have a new shape, and glibc keeps freed blocks mapped for
reuse that rarely fits: over a few dozen casts a worker's RSS grows from ~1.1 GB to 3 GB and
more (`python -m loadtest` prints it per scenario). `malloc_trim` hands them back, but one call
walks the whole heap (tens of ms on a busy 2-core box), so it runs only once RSS has grown by
`slack` bytes since the last trim: memory stays bounded near the model's own size for a trim
every few dozen chunks instead of one per chunk.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Callable

__all__ = ["HeapTrimmer"]

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _resident_bytes() -> int | None:
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, or None where the C library has none (musl, macOS, Windows)."""
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None
    if trim is not None:
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


class HeapTrimmer:
    """Call after each chunk; trims when RSS is `slack` bytes above what the last trim left."""

    def __init__(self, slack: int = 256 << 20) -> None:
        self._trim = _malloc_trim() if _resident_bytes() is not None else None
        self._slack = slack
        self._floor = _resident_bytes() or 0

    @property
    def available(self) -> bool:
        return self._trim is not None

    def __call__(self) -> bool:
        """Whether it trimmed."""
        if self._trim is None:
            return False
        resident = _resident_bytes() or 0
        if resident <= self._floor + self._slack:
            return False
        return self.trim()

    def trim(self) -> bool:
        """Trim now, whatever RSS grew by (after a model was dropped, say); whether it could."""
        if self._trim is None:
            return False
        self._trim(0)
        self._floor = _resident_bytes() or 0
        return True
