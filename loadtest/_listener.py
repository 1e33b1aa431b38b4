"""A simulated listener: a real-time player that starts at the first audio it receives.

Audio that arrives before its playback time waits in the buffer; audio that arrives after it
is an underrun: playback stalls until it lands, and every later piece is due that much later
(a player pauses, it does not skip). The gap is the total time playback stood still.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["LATE_TOLERANCE_S", "PCM_BYTES_PER_S", "Listener"]

LATE_TOLERANCE_S = 0.005
"""Lateness below this is timer noise, not an audible gap."""

PCM_BYTES_PER_S = 24_000 * 2
"""`response_format: pcm` is 24 kHz s16le mono: byte counts are exact audio durations."""


@dataclass
class Listener:
    """One listener's playback, on the `time.monotonic()` clock of the caller."""

    submitted: float
    first: float | None = None
    received_s: float = 0.0
    stall_s: float = 0.0
    underruns: int = 0
    ended: float | None = None
    error: str | None = None
    timeline: list[tuple[float, float, float]] = field(default_factory=list)
    """Per arrival: (seconds since submitted, audio buffered just before, just after)."""

    def receive(self, now: float, seconds: float) -> None:
        """`seconds` more audio arrived at `now`."""
        if self.first is None:
            self.first = now
        due = self.first + self.received_s + self.stall_s
        late = now - due
        if late > LATE_TOLERANCE_S:
            self.underruns += 1
            self.stall_s += late
        buffered = max(0.0, due - now)
        self.received_s += seconds
        self.timeline.append(
            (round(now - self.submitted, 4), round(buffered, 4), round(buffered + seconds, 4))
        )

    def end(self, now: float, error: str | None = None) -> None:
        self.ended = now
        self.error = error

    @property
    def ttfa(self) -> float | None:
        """Seconds from the request to its first audio; None if none came."""
        return None if self.first is None else self.first - self.submitted
