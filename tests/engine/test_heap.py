"""The CPU engine's heap trimming: freed memory goes back to the system once RSS has grown."""

from __future__ import annotations

import pytest

from speechd.engine._heap import HeapTrimmer, _resident_bytes

MIB = 1 << 20


def test_freed_heap_is_given_back_once_rss_grew_by_the_slack() -> None:
    trimmer = HeapTrimmer(slack=64 * MIB)
    if not trimmer.available:
        pytest.skip("this C library has no malloc_trim")
    assert not trimmer(), "nothing grew yet"
    # 100 kB blocks stay below glibc's mmap threshold, so they live in the heap; the fence
    # keeps the heap's top in place, so only a trim can hand the freed middle back.
    blocks = [bytearray(100_000) for _ in range(2_000)]
    fence = bytearray(100_000)
    del blocks
    grown = _resident_bytes()
    assert grown is not None
    assert trimmer()
    after = _resident_bytes()
    assert after is not None and after < grown - 100 * MIB, (grown // MIB, after // MIB)
    assert not trimmer(), "the floor moved down with the trim"
    del fence
