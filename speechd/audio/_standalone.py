"""The reference for decoding one record of a cast on its own (see the package docstring).

A player in JavaScript follows the same steps; the helpers that find frame and page boundaries
read only what a decoder reads anyway (mp3 and ADTS frame headers, Ogg page headers).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ._formats import LAYOUTS, SAMPLE_RATE, check_format
from ._mp3 import mp3_frame_lengths
from ._raw import wav_header

__all__ = ["Standalone", "adts_frame_lengths", "ogg_pages", "standalone_record"]

_OPUS_HEAD_OFFSET = 28  # the first page's 27-byte header and 1-byte segment table


@dataclass(frozen=True, slots=True)
class Standalone:
    """One record made decodable on its own."""

    data: bytes
    """A complete little file: hand it to a decoder (decodeAudioData, ffmpeg)."""
    keep: int | None
    """Keep only the last `keep` decoded samples (None: keep them all)."""
    rate: int
    """The rate the decoder outputs (and `keep` counts in)."""
    exact: bool
    """Whether the kept samples equal those of decoding the whole file."""


def adts_frame_lengths(data: bytes) -> list[int]:
    """Lengths of the whole ADTS frames at the start of `data` (13-bit frame_length field)."""
    lengths: list[int] = []
    pos = 0
    while pos + 7 <= len(data):
        if data[pos] != 0xFF or data[pos + 1] & 0xF6 != 0xF0:
            raise ValueError(f"no ADTS sync word at byte {pos}")
        length = ((data[pos + 3] & 0x03) << 11) | (data[pos + 4] << 3) | (data[pos + 5] >> 5)
        if length < 7 or pos + length > len(data):
            break
        lengths.append(length)
        pos += length
    return lengths


def ogg_pages(data: bytes) -> list[tuple[int, int]]:
    """(length, granule position) of each whole Ogg page at the start of `data`."""
    pages: list[tuple[int, int]] = []
    pos = 0
    while pos + 27 <= len(data):
        if data[pos : pos + 4] != b"OggS":
            raise ValueError(f"no Ogg capture pattern at byte {pos}")
        (granule,) = struct.unpack_from("<q", data, pos + 6)
        segments = data[pos + 26]
        if pos + 27 + segments > len(data):
            break
        length = 27 + segments + sum(data[pos + 27 : pos + 27 + segments])
        if pos + length > len(data):
            break
        pages.append((length, granule))
        pos += length
    return pages


def _tail(data: bytes, lengths: list[int], count: int) -> bytes:
    """The last `count` units (of the given lengths, which cover `data` from its start)."""
    if count <= 0 or not lengths:
        return b""
    return data[sum(lengths) - sum(lengths[-count:]) : sum(lengths)]


def standalone_record(fmt: str, prior: bytes, record: bytes) -> Standalone | None:
    """Record `record` of a cast in `fmt`, made decodable on its own.

    `prior` is everything the file's earlier records hold, concatenated (b"" for record 0);
    only its header and its last few frames or pages are read. Returns None for a record without
    audio (empty, or a record 0 that holds only the header): it adds no samples. Holds at
    SAMPLE_RATE.
    """
    layout = LAYOUTS[check_format(fmt)]
    if len(record) <= (0 if prior else layout.header_bytes):
        return None  # nothing, or record 0 holding only the header
    rate = layout.decode_rate
    if fmt == "pcm":
        return Standalone(wav_header(SAMPLE_RATE) + record, None, rate, True)
    if fmt in ("wav", "flac"):
        header = prior[: layout.header_bytes]
        return Standalone(header + record, None, rate, True)
    if fmt == "mp3":
        frames = len(mp3_frame_lengths(record))
        pre = _tail(prior, mp3_frame_lengths(prior), layout.preroll)
        return Standalone(pre + record, frames * layout.frame_samples, rate, True)
    if fmt == "aac":
        frames = len(adts_frame_lengths(record))
        pre = _tail(prior, adts_frame_lengths(prior), layout.preroll)
        return Standalone(pre + record, frames * layout.frame_samples, rate, True)
    # opus: header pages, then pre-roll pages, then the record; keep the record's granule span.
    # Granules count 48 kHz samples from before the pre-skip (OpusHead bytes 10-11), which
    # decoders drop from the start of a stream.
    if not prior:
        return Standalone(record, None, rate, False)
    header = prior[: layout.header_bytes]
    audio = prior[layout.header_bytes :]
    pages = ogg_pages(audio)
    pre = _tail(audio, [length for length, _ in pages], layout.preroll)
    (pre_skip,) = struct.unpack_from("<H", header, _OPUS_HEAD_OFFSET + 10)
    start = pages[-1][1] if pages else pre_skip
    end = ogg_pages(record)[-1][1]
    return Standalone(header + pre + record, end - start, rate, False)
