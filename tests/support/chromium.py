"""What the browser tests allow Chromium's decoders beyond `speechd.audio`'s contract."""

from __future__ import annotations

__all__ = ["CHROMIUM_STEP"]

CHROMIUM_STEP = {"mp3": 4e-5}
"""The most a record decoded on its own (after its pre-roll, `standalone_record`) may differ
from the whole file's decode, per format, in Chromium. Chromium 156 and ffmpeg give mp3 bit
for bit; Debian's Chromium 150 differs by one 16-bit step (2**-15, 3.05e-5, and its float
rounding) in a quarter of the samples, which no one hears; a pre-roll too short to be
right differs by up to 0.2."""
