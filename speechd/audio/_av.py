"""opus (Ogg), aac (ADTS) and flac (native): FFmpeg's encoders and muxers through PyAV.

One codec context and one muxer live for the whole cast, writing into an in-memory sink that
`encode` drains, so the records concatenate to exactly the file FFmpeg would have written in one
go to a pipe. Samples are fed to the codec in its own frame size; the remainder waits for the
next chunk, and `final=True` feeds it as a short last frame, drains the codec and closes the
muxer (the last Ogg page carries the end granule, so decoders trim Opus's padding).

Determinism: `fflags=+bitexact` and the codec's bitexact flag keep version strings, random Ogg
serial numbers and timestamps out of the bytes, so the same samples give the same file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import av
import numpy as np

from ._base import EncoderBase, to_s16
from ._resume import SPLICE, VERSION, checkpoint_of
from ._standalone import adts_frame_lengths, ogg_pages

__all__ = ["PROFILES", "AvEncoder", "AvProfile", "fingerprint"]

_OPUS_HEADER_BYTES: Final = 97  # OpusHead and OpusTags pages (LAYOUTS["opus"].header_bytes)


@dataclass(frozen=True)
class AvProfile:
    """How one format is encoded: FFmpeg codec and muxer names, and their settings."""

    codec: str
    container: str
    sample_format: str  # FFmpeg's name; packed "s16"/"flt" or planar "fltp" (same for mono)
    bit_rate: int | None = None
    codec_options: dict[str, str] = field(default_factory=dict)
    container_options: dict[str, str] = field(default_factory=dict)
    min_first_packets: int = 0  # hold the first record back until it has this many packets


PROFILES: Final[dict[str, AvProfile]] = {
    # 60 ms Opus packets, one per Ogg page: the muxer holds back its newest page until the next
    # packet (to flag the last page EOS at the end), so small pages keep a record's held-back
    # audio short (one packet), and 60 ms packets keep the 28-byte page overhead low (~3.7 kbit/s).
    "opus": AvProfile(
        codec="libopus",
        container="ogg",
        sample_format="flt",
        bit_rate=32_000,
        codec_options={"application": "audio", "frame_duration": "60", "vbr": "on"},
        container_options={"page_duration": "1"},
    ),
    # AAC-LC in ADTS; FFmpeg's native encoder. PNS (noise substitution) is off: the decoder fills
    # such bands from its own random generator, whose state would differ when a record is decoded
    # on its own; without it, a record decoded after a one-frame pre-roll is exact.
    "aac": AvProfile(
        codec="aac",
        container="adts",
        sample_format="fltp",
        bit_rate=64_000,
        codec_options={"aac_pns": "0"},
        # Chromium's decodeAudioData rejects ADTS data of fewer than three frames, except at the
        # very start of a stream; three in record 0 keep it decodable in every case.
        min_first_packets=3,
    ),
    # No PADDING block (FFmpeg adds 8 KiB by default, for tag editors that rewrite in place).
    "flac": AvProfile(
        codec="flac",
        container="flac",
        sample_format="s16",
        container_options={"metadata_header_padding": "0"},
    ),
}


class _Sink:
    """A write-only, unseekable file for PyAV: muxers never seek back into sent bytes."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def write(self, data: bytes) -> int:
        self._buf += data
        return len(data)

    def take(self) -> bytes:
        data = bytes(self._buf)
        self._buf.clear()
        return data


def fingerprint(fmt: str, sample_rate: int) -> str:
    """What a checkpoint of `fmt` at `sample_rate` needs to match to be continued."""
    profile = PROFILES[fmt]
    settings = ",".join(f"{k}={v}" for k, v in sorted(profile.codec_options.items()))
    return f"{fmt}/{sample_rate}/{profile.codec}/{profile.bit_rate or 0}/{settings}/r{VERSION}"


class AvEncoder(EncoderBase):
    """A continuous FFmpeg encoder + muxer for one cast in one of PROFILES' formats."""

    def __init__(self, fmt: str, sample_rate: int) -> None:
        super().__init__(sample_rate)
        self.format = fmt
        self.fingerprint = fingerprint(fmt, self.sample_rate)
        profile = PROFILES[fmt]
        self._profile = profile
        self._sink = _Sink()
        self._container = av.open(
            self._sink,
            mode="w",
            format=profile.container,
            container_options={
                "fflags": "+bitexact",
                "flush_packets": "1",
                **profile.container_options,
            },
        )
        stream = self._container.add_stream(profile.codec, rate=self.sample_rate)
        ctx = stream.codec_context
        ctx.layout = "mono"
        ctx.format = profile.sample_format
        if profile.bit_rate is not None:
            ctx.bit_rate = profile.bit_rate
        ctx.options = {"flags": "+bitexact", **profile.codec_options}
        self._stream = stream
        self._ctx = ctx
        self._container.start_encoding()  # opens the codec and writes the header into the sink
        self._frame_size = ctx.frame_size or 4096
        self._pending = np.empty(0, dtype=np.float32)
        self._pts = 0
        self._packets = 0
        self._started = False
        self._units = 0  # frames (aac, flac) or Ogg pages (opus) returned so far
        self._granule = 0  # opus: the last page's granule
        self._head = b""  # opus: the OpusHead and OpusTags pages, once returned

    def _encode(self, samples: np.ndarray, final: bool) -> bytes:
        pending = np.concatenate([self._pending, samples]) if self._pending.size else samples
        size = self._frame_size
        whole = len(pending) - len(pending) % size
        for start in range(0, whole, size):
            self._send(pending[start : start + size])
        self._pending = pending[whole:].copy()
        if final:
            if self._pending.size or not self._pts:
                # The short last frame; a cast without samples gets one silent sample, as an
                # Ogg or ADTS file without a single packet is not a file decoders accept.
                self._send(self._pending if self._pending.size else np.zeros(1, np.float32))
                self._pending = self._pending[:0]
            self._mux(self._stream.encode(None))
            self._container.close()
        elif not self._started and self._packets < self._profile.min_first_packets:
            return b""
        out = self._sink.take()
        self._count(out, first=not self._started)
        self._started = True
        return out

    def _count(self, out: bytes, *, first: bool) -> None:
        """Count the frames or pages in `out` (what a checkpoint says the file holds)."""
        if self.format == "aac":
            self._units += len(adts_frame_lengths(out))
        elif self.format == "opus":
            if first:
                self._head, out = out[:_OPUS_HEADER_BYTES], out[_OPUS_HEADER_BYTES:]
            pages = ogg_pages(out)
            self._units += len(pages)
            if pages:
                self._granule = pages[-1][1]
        # flac: the muxer writes each frame as it comes (counted in _mux)

    def checkpoint(self) -> bytes:
        fmt = self.format
        splice = SPLICE[fmt]
        if fmt == "opus":
            # Audio page k ends at granule 2880 (k + 1) (48 kHz, pre-skip included): the input
            # up to 1440 (k + 1) - the codec's look-ahead. Pages are numbered after the two
            # header pages; serial and pre-skip come from those.
            serial = int.from_bytes(self._head[14:18], "little") if self._head else 0
            pre_skip = int.from_bytes(self._head[38:40], "little") if self._head else 0
            return checkpoint_of(
                self,
                covered=self._units * splice.frame - splice.delay,
                started=self._started,
                preroll=splice.preroll,
                units=self._units + 2,
                granule=self._granule,
                serial=serial,
                pre_skip=pre_skip,
            )
        return checkpoint_of(
            self,
            covered=self._units * splice.frame - splice.delay,
            started=self._started,
            preroll=splice.preroll,
            units=self._units,
        )

    def _send(self, samples: np.ndarray) -> None:
        if self._profile.sample_format == "s16":
            data: np.ndarray = to_s16(samples)
        else:
            data = np.ascontiguousarray(samples, dtype=np.float32)
        frame = av.AudioFrame.from_ndarray(
            data.reshape(1, -1), format=self._profile.sample_format, layout="mono"
        )
        frame.sample_rate = self.sample_rate
        frame.pts = self._pts
        frame.time_base = self._ctx.time_base
        self._pts += len(samples)
        self._mux(self._stream.encode(frame))

    def _mux(self, packets: list[av.Packet]) -> None:
        self._packets += len(packets)
        if self.format == "flac":
            self._units += len(packets)
        self._container.mux(packets)
