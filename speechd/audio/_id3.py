"""The ID3v2.4 tag at the head of an audiobook's mp3: title, author, cover and chapters.

    TIT2, TALB  the book's title           TPE1  its author
    APIC        the cover (a JPEG or PNG)  CTOC  "toc": the chapters, in order
    CHAP        one per chapter ("ch0", "ch1", ...): its start and end time in milliseconds,
                the byte offsets of its first frame and of the byte after its last (from the
                file's start, this tag included; 0xFFFFFFFF, "unknown", past 4 GiB), and a
                TIT2 with its title

A CTOC lists at most 255 entries, so a book of more chapters gets a top-level CTOC of CTOCs
("toc0", "toc1", ...), each ordered and listing up to 255 chapters. Text is UTF-8 (encoding 3);
no unsynchronisation, no padding, no extended header.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

__all__ = ["id3_tag"]

_MAX_SIZE: Final = (1 << 28) - 1
_UTF8: Final = b"\x03"


def _synchsafe(n: int) -> bytes:
    if n > _MAX_SIZE:
        raise ValueError(f"an ID3v2 tag or frame of {n} bytes is over the 256 MiB it can hold")
    return bytes([(n >> 21) & 0x7F, (n >> 14) & 0x7F, (n >> 7) & 0x7F, n & 0x7F])


def _frame(kind: bytes, payload: bytes) -> bytes:
    return kind + _synchsafe(len(payload)) + b"\0\0" + payload


def _text(kind: bytes, value: str) -> bytes:
    return _frame(kind, _UTF8 + value.encode("utf-8"))


def _ctoc(ident: bytes, children: Sequence[bytes], *, top: bool) -> bytes:
    flags = 0x03 if top else 0x01  # top-level (0x02), ordered (0x01)
    return _frame(
        b"CTOC",
        ident + b"\0" + bytes([flags, len(children)]) + b"".join(c + b"\0" for c in children),
    )


def id3_tag(
    chapters: Sequence[tuple[str, int, int, int, int]],
    *,
    title: str,
    author: str,
    cover: bytes,
    cover_type: str,
    audio_at: int,
) -> bytes:
    """The tag, for chapters given as (title, start ms, end ms, first byte, end byte) with their
    byte offsets counted from the first audio byte; `audio_at` is where that byte falls in the
    file, the tag's own length (a tag's size does not depend on the offsets' values, so build
    it once with 0 to learn it)."""
    frames = []
    if title:
        frames += [_text(b"TIT2", title), _text(b"TALB", title)]
    if author:
        frames.append(_text(b"TPE1", author))
    if cover and cover_type in ("image/jpeg", "image/png"):
        frames.append(_frame(b"APIC", _UTF8 + cover_type.encode("latin-1") + b"\0\x03\0" + cover))
    ids = [f"ch{i}".encode() for i in range(len(chapters))]
    if len(ids) <= 255:
        frames.append(_ctoc(b"toc", ids, top=True))
    else:
        groups = [ids[i : i + 255] for i in range(0, len(ids), 255)]
        names = [f"toc{i}".encode() for i in range(len(groups))]
        frames.append(_ctoc(b"toc", names, top=True))
        frames += [_ctoc(n, g, top=False) for n, g in zip(names, groups, strict=True)]
    for ident, (name, start, end, first, last) in zip(ids, chapters, strict=True):
        at = [audio_at + x if audio_at + x <= 0xFFFFFFFF else 0xFFFFFFFF for x in (first, last)]
        times = struct.pack(">IIII", start, end, *at)
        frames.append(_frame(b"CHAP", ident + b"\0" + times + _text(b"TIT2", name)))
    body = b"".join(frames)
    return b"ID3\x04\x00\x00" + _synchsafe(len(body)) + body
