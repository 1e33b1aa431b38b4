"""The container pieces a continued file writes itself (see `_resume`): Ogg pages (for Opus,
one packet per page), FLAC frames renumbered, ADTS headers; with the CRCs each needs."""

from __future__ import annotations

import struct

__all__ = ["adts_header", "flac_renumber", "ogg_page"]


def _ogg_crc_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) if crc & 0x80000000 else crc << 1
        table.append(crc & 0xFFFFFFFF)
    return table


_OGG_CRC = _ogg_crc_table()


def _ogg_crc(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc = ((crc << 8) & 0xFFFFFFFF) ^ _OGG_CRC[((crc >> 24) ^ byte) & 0xFF]
    return crc


def ogg_page(packet: bytes, *, granule: int, serial: int, sequence: int, eos: bool) -> bytes:
    """One Ogg page holding one whole packet (what FFmpeg's muxer writes for Opus here)."""
    lacing = [255] * (len(packet) // 255) + [len(packet) % 255]
    if len(lacing) > 255:
        raise ValueError("a packet this long does not fit one Ogg page")
    header = struct.pack(
        "<4sBBqIIIB", b"OggS", 0, 4 if eos else 0, granule, serial, sequence, 0, len(lacing)
    )
    page = header + bytes(lacing) + packet
    crc = _ogg_crc(page)
    return page[:22] + struct.pack("<I", crc) + page[26:]


def _crc8(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = ((crc << 1) ^ 0x07) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
    return crc


def _crc16_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x8005) if crc & 0x8000 else crc << 1
        table.append(crc & 0xFFFF)
    return table


_CRC16 = _crc16_table()


def _crc16(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC16[((crc >> 8) ^ byte) & 0xFF]
    return crc


def _utf8_number(value: int) -> bytes:
    """FLAC's "UTF-8" coding of a frame number (up to 31 bits)."""
    if value < 0x80:
        return bytes([value])
    for length in range(2, 7):
        if value < 1 << (5 * length + 1):
            out = [0x80 | ((value >> (6 * i)) & 0x3F) for i in range(length - 2, -1, -1)]
            lead = ((0xFF << (8 - length)) & 0xFF) | (value >> (6 * (length - 1)))
            return bytes([lead, *out])
    raise ValueError(f"FLAC frame number {value} is too large")


def _utf8_length(first: int) -> int:
    if first < 0x80:
        return 1
    length = 0
    while first & (0x80 >> length):
        length += 1
    return length


def flac_renumber(frame: bytes, number: int) -> bytes:
    """A fixed-blocksize FLAC frame with its frame number set to `number` (CRCs redone)."""
    if frame[0] != 0xFF or frame[1] & 0xFE != 0xF8:
        raise ValueError("not a FLAC frame")
    if frame[1] & 1:
        raise ValueError("a variable-blocksize FLAC frame has no frame number")
    at = 4 + _utf8_length(frame[4])
    block_code, rate_code = frame[2] >> 4, frame[2] & 0x0F
    extra = {6: 1, 7: 2}.get(block_code, 0) + {12: 1, 13: 2, 14: 2}.get(rate_code, 0)
    head = frame[:4] + _utf8_number(number) + frame[at : at + extra]
    head += bytes([_crc8(head)])
    body = head + frame[at + extra + 1 : -2]
    return body + struct.pack(">H", _crc16(body))


def adts_header(length: int, sample_rate: int) -> bytes:
    """The 7-byte ADTS header FFmpeg's muxer writes for one AAC-LC mono frame."""
    rates = (96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000)
    index = rates.index(sample_rate)
    total = length + 7
    fullness = 0x7FF
    bits = (
        (0xFFF << 44)
        | (0 << 43)  # MPEG-4
        | (0 << 41)  # layer
        | (1 << 40)  # no CRC
        | (1 << 38)  # AAC-LC (object type 2, minus one)
        | (index << 34)
        | (0 << 33)
        | (1 << 30)  # one channel
        | (total << 13)
        | (fullness << 2)
    )
    return bits.to_bytes(7, "big")
