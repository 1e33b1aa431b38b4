"""A real-time listener simulated from a cast's durable records: it starts playing at the first
audio of the playable sequence and waits at the live edge whenever it catches up, so its
stalls are what a person listening to the cast live would have heard."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from speechd.casts._records import audio_chunk
from speechd.durable import Record

from ._helpers import playable


@dataclass(frozen=True)
class Stall:
    at_ms: int  # when the listener ran dry (the writer's clock)
    ms: int  # how long it waited


def stalls(stream: list[Record]) -> list[Stall]:
    """The waits of a listener who started at the playable sequence's first audio."""
    records = playable(stream)
    clock = records[0].timestamp
    out = []
    for record in records:
        if record.timestamp > clock:
            out.append(Stall(clock, record.timestamp - clock))
            clock = record.timestamp
        clock += audio_chunk(record).duration_ms
    return out


def stall_across(stream: list[Record], fault_ms: int) -> int:
    """The wait that a fault at `fault_ms` caused (0 if the listener never ran dry after it)."""
    later = [s for s in stalls(stream) if s.at_ms + s.ms > fault_ms]
    return max((s.ms for s in later), default=0)


def made_twice(calls: list[str], planned: list[str]) -> int:
    """How many of the cast's chunks (`planned`, by text) were synthesized more than once;
    asserts every one was synthesized at least once."""
    counts = Counter(text for text in calls if text in set(planned))
    assert set(counts) == set(planned), set(planned) - set(counts)
    return sum(n - 1 for n in counts.values())
