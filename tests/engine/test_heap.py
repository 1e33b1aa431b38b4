"""The CPU engine's heap trimming: freed memory goes back to the system once RSS has grown."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from harness.servers import ROOT

# In a fresh interpreter: in the test process, heap left free by earlier tests would absorb
# the allocations below without RSS growing, and the trimmer would rightly do nothing.
SCRIPT = textwrap.dedent(
    """
    import sys
    from speechd.engine._heap import HeapTrimmer, _resident_bytes

    MIB = 1 << 20
    trimmer = HeapTrimmer(slack=64 * MIB)
    if not trimmer.available:
        sys.exit(3)
    assert not trimmer(), "nothing grew yet"
    # 100 kB blocks stay below glibc's mmap threshold, so they live in the heap; the fence
    # keeps the heap's top in place, so only a trim can hand the freed middle back.
    blocks = [bytearray(100_000) for _ in range(2_000)]
    fence = bytearray(100_000)
    del blocks
    grown = _resident_bytes()
    assert trimmer(), "RSS grew by more than the slack"
    after = _resident_bytes()
    assert after < grown - 100 * MIB, (grown // MIB, after // MIB)
    assert not trimmer(), "the floor moved down with the trim"
    """
)


def test_freed_heap_is_given_back_once_rss_grew_by_the_slack() -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    if result.returncode == 3:
        pytest.skip("this C library has no malloc_trim")
    assert result.returncode == 0, result.stderr
