"""mp3: one continuous LAME encoder per cast, cut into records at frame boundaries.

LAME returns bytes as soon as they are final, which is often in the middle of a frame: with the
bit reservoir, the tail of frame n's slot holds main data of frame n+1, written only when frame
n+1 is encoded. This encoder keeps those bytes back, so every record holds whole frames only,
and the first record holds at least two (Chromium's decodeAudioData rejects a one-frame file).
"""

from __future__ import annotations

from typing import Final

import lameenc
import numpy as np

from ._base import EncoderBase, to_s16
from ._formats import MP3_BITRATE_KBPS
from ._resume import SPLICE, VERSION, checkpoint_of

__all__ = ["Mp3Encoder", "mp3_frame_lengths"]

_QUALITY: Final = 2
"""LAME's algorithm quality, 0 (best, slowest) to 9: 2 is LAME's "recommended high quality"."""

_MIN_FIRST_FRAMES: Final = 2

FINGERPRINT: Final = f"mp3/{{rate}}/cbr{MP3_BITRATE_KBPS}/q{_QUALITY}/r{VERSION}"

# bitrate_index -> kbit/s, for MPEG-1 and for MPEG-2/2.5 (LSF) Layer III.
_BITRATES_V1: Final = (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320)
_BITRATES_V2: Final = (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160)
# version bits -> sample rates by sample_rate_index; 1 is reserved.
_RATES: Final = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}


def _frame_length(header: int) -> int:
    """Length in bytes of the Layer III frame whose 4-byte header is `header`."""
    version = (header >> 19) & 3
    bitrate_index = (header >> 12) & 15
    rate_index = (header >> 10) & 3
    if header >> 21 != 0x7FF or version == 1 or (header >> 17) & 3 != 1:
        raise ValueError(f"not an MPEG Layer III frame header: {header:08x}")
    if bitrate_index in (0, 15) or rate_index == 3:
        raise ValueError(f"free-format or reserved mp3 frame header: {header:08x}")
    padding = (header >> 9) & 1
    rate = _RATES[version][rate_index]
    if version == 3:
        return 144 * _BITRATES_V1[bitrate_index] * 1000 // rate + padding
    return 72 * _BITRATES_V2[bitrate_index] * 1000 // rate + padding


def mp3_frame_lengths(data: bytes) -> list[int]:
    """Lengths of the whole Layer III frames at the start of `data` (a trailing part frame is
    left out). Raises ValueError if `data` does not start at a frame header."""
    lengths: list[int] = []
    pos = 0
    while pos + 4 <= len(data):
        length = _frame_length(int.from_bytes(data[pos : pos + 4], "big"))
        if pos + length > len(data):
            break
        lengths.append(length)
        pos += length
    return lengths


class Mp3Encoder(EncoderBase):
    """CBR mp3 (MPEG-2 Layer III at 24 kHz), gapless across records, whole frames per record."""

    format = "mp3"

    def __init__(self, sample_rate: int) -> None:
        super().__init__(sample_rate)
        self.fingerprint = FINGERPRINT.format(rate=self.sample_rate)
        self._frames = 0  # whole frames returned so far
        lame = lameenc.Encoder()
        lame.set_channels(1)
        lame.set_in_sample_rate(self.sample_rate)
        lame.set_out_sample_rate(self.sample_rate)
        lame.set_bit_rate(MP3_BITRATE_KBPS)
        lame.set_quality(_QUALITY)
        self._lame = lame
        self._pending = bytearray()
        self._fed = False
        self._started = False

    def _encode(self, samples: np.ndarray, final: bool) -> bytes:
        if samples.size or (final and not self._fed):
            # lameenc refuses to flush before any encode; an empty cast becomes 2 silent frames.
            self._pending += self._lame.encode(to_s16(samples).tobytes())
            self._fed = True
        if final:
            self._pending += self._lame.flush()
            out = bytes(self._pending)
            self._pending.clear()
            self._frames += len(mp3_frame_lengths(out))
            return out
        lengths = mp3_frame_lengths(self._pending)
        if not self._started and len(lengths) < _MIN_FIRST_FRAMES:
            return b""
        self._started = True
        cut = sum(lengths)
        out = bytes(self._pending[:cut])
        del self._pending[:cut]
        self._frames += len(lengths)
        return out

    def checkpoint(self) -> bytes:
        # Frame k holds input [576k - 576, 576k): LAME's encoder delay is one frame.
        splice = SPLICE["mp3"]
        return checkpoint_of(
            self,
            covered=self._frames * splice.frame - splice.delay,
            started=self._started,
            preroll=splice.preroll,
        )
