"""The boxes of an audiobook's MP4 (`.m4b`) before its audio: `ftyp`, `moov`, the `mdat` header.

    ftyp  M4B  (compatible M4A, mp42, isom)
    moov  mvhd
          trak  audio: tkhd, edts/elst (skips the encoder's priming), tref/chap -> track 2,
                mdia: mdhd, hdlr soun, minf: smhd, dinf, stbl: stsd (mp4a + esds), stts,
                stsc, stsz, stco or co64, sgpd + sbgp (AAC's roll of -1)
          trak  chapters: a QuickTime text track (disabled), one sample per chapter, whose
                times are the chapters' marks to the millisecond (what Apple's players and
                ffprobe read)
          udta  chpl (Nero chapters: mutagen and older players; up to 255 of them),
                meta/ilst: ©nam, ©alb (the title), ©ART (the author), covr, stik = 2
    mdat  the chapter titles' samples, then each chapter's AAC frames (ADTS headers off)

Everything is computed from the frames' sizes, so the file's length is known before a byte
of audio is read, and the audio streams after these boxes chapter by chapter. Times are in
samples (the timescale is the sample rate; the chapter track's is 1000); 64-bit boxes (version
1, co64, a large `mdat`) are written only where a value needs them. No dates, no tool name:
the same chapters give the same bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

import numpy as np

__all__ = ["AacTrack", "m4b_head"]

_MATRIX: Final = struct.pack(">9I", 0x10000, 0, 0, 0, 0x10000, 0, 0, 0, 0x40000000)
_UND: Final = 0x55C4  # ISO 639-2 "und", packed as mdhd wants it
#: A QuickTime text sample description after its data reference index: display flags,
#: justification, colours, default box, font (the one FFmpeg writes for chapter tracks).
_TEXT_ENTRY: Final = bytes.fromhex(
    "00000001000000000000000000000000000000000000000100000000000000000"
    "00d667461620001000100"
)
#: After each title in its sample: an `encd` atom saying the text is UTF-8 (Apple needs it).
_ENCD: Final = bytes.fromhex("0000000c656e636400000100")
_COVER_TYPES: Final = {"image/jpeg": 13, "image/png": 14}
_U32: Final = 0xFFFFFFFF


def _box(kind: bytes, *parts: bytes) -> bytes:
    payload = b"".join(parts)
    return struct.pack(">I4s", 8 + len(payload), kind) + payload


def _full(kind: bytes, version: int, flags: int, *parts: bytes) -> bytes:
    return _box(kind, struct.pack(">I", version << 24 | flags), *parts)


def _descriptor(tag: int, payload: bytes) -> bytes:
    n = len(payload)  # the 4-byte length form FFmpeg writes
    return bytes([tag, 0x80 | (n >> 21) & 0x7F, 0x80 | (n >> 14) & 0x7F, 0x80 | (n >> 7) & 0x7F,
                  n & 0x7F]) + payload  # fmt: skip


class AacTrack:
    """The AAC track's facts: its config and rate, the raw frames' sizes by chunk (one chunk
    per chapter), and the presentation (`skip` media samples cut at the start, `duration`
    shown)."""

    def __init__(
        self, config: bytes, rate: int, chunks: Sequence[np.ndarray], skip: int, duration: int
    ) -> None:
        self.config = config
        self.rate = rate
        self.chunks = chunks
        self.skip = skip
        self.duration = duration
        self.frames = sum(len(c) for c in chunks)
        self.media = self.frames * 1024
        self.bytes = sum(int(c.sum()) for c in chunks)


def _times(version: int, *values: int) -> bytes:
    return struct.pack(">" + ("Q" if version else "I") * len(values), *values)


def _tkhd(track: int, duration: int, *, flags: int, audio: bool) -> bytes:
    v = int(duration > _U32)
    return _full(
        b"tkhd", v, flags, _times(v, 0, 0), struct.pack(">II", track, 0), _times(v, duration),
        bytes(8), struct.pack(">hhhh", 0, int(audio), 0x100 if audio else 0, 0), _MATRIX,
        bytes(8),
    )  # fmt: skip


def _mdhd(rate: int, duration: int) -> bytes:
    v = int(duration > _U32)
    return _full(b"mdhd", v, 0, _times(v, 0, 0), struct.pack(">I", rate), _times(v, duration),
                 struct.pack(">HH", _UND, 0))  # fmt: skip


def _hdlr(kind: bytes, name: bytes) -> bytes:
    return _full(b"hdlr", 0, 0, bytes(4), kind, bytes(12), name + b"\0")


def _dinf() -> bytes:
    return _box(b"dinf", _full(b"dref", 0, 0, struct.pack(">I", 1), _full(b"url ", 0, 1)))


def _stsc(counts: Sequence[int]) -> bytes:
    """One chunk per entry of `counts` (its samples); an entry where the count changes."""
    rows, last = [], -1
    for i, n in enumerate(counts, 1):
        if n != last:
            rows.append(struct.pack(">III", i, n, 1))
            last = n
    return _full(b"stsc", 0, 0, struct.pack(">I", len(rows)), *rows)


def _offsets(offsets: Sequence[int], wide: bool) -> bytes:
    if wide:
        return _full(b"co64", 0, 0, struct.pack(f">I{len(offsets)}Q", len(offsets), *offsets))
    return _full(b"stco", 0, 0, struct.pack(f">I{len(offsets)}I", len(offsets), *offsets))


def _esds(track: AacTrack) -> bytes:
    sizes = np.concatenate(track.chunks) if track.chunks else np.zeros(1, np.int64)
    seconds = max(track.media / track.rate, 1e-9)
    average = int(track.bytes * 8 / seconds)
    peak = int(sizes.max()) * 8 * track.rate // 1024
    config = _descriptor(
        0x04,
        bytes([0x40, 0x15]) + int(sizes.max()).to_bytes(3, "big") + struct.pack(">II", peak,
        average) + _descriptor(0x05, track.config),
    )  # fmt: skip
    es = _descriptor(0x03, struct.pack(">HB", 1, 0) + config + _descriptor(0x06, b"\x02"))
    return _full(b"esds", 0, 0, es)


def _audio_trak(track: AacTrack, offsets: Sequence[int], wide: bool) -> bytes:
    v = int(track.duration > _U32 or track.skip > 0x7FFFFFFF)
    elst = _full(b"elst", v, 0, struct.pack(">I", 1), _times(v, track.duration, track.skip),
                 struct.pack(">hh", 1, 0))  # fmt: skip
    mp4a = _box(
        b"mp4a", bytes(6), struct.pack(">H", 1), bytes(8), struct.pack(">HHHH", 1, 16, 0, 0),
        struct.pack(">I", track.rate << 16), _esds(track),
    )  # fmt: skip
    sizes = (np.concatenate(track.chunks) if track.chunks else np.zeros(0)).astype(">u4")
    stbl = _box(
        b"stbl",
        _full(b"stsd", 0, 0, struct.pack(">I", 1), mp4a),
        _full(b"stts", 0, 0, struct.pack(">III", 1, track.frames, 1024)),
        _stsc([len(c) for c in track.chunks]),
        _full(b"stsz", 0, 0, struct.pack(">II", 0, track.frames), sizes.tobytes()),
        _offsets(offsets, wide),
        _full(b"sgpd", 1, 0, b"roll", struct.pack(">IIh", 2, 1, -1)),
        _full(b"sbgp", 0, 0, b"roll", struct.pack(">III", 1, track.frames, 1)),
    )
    minf = _box(b"minf", _full(b"smhd", 0, 0, bytes(4)), _dinf(), stbl)
    return _box(
        b"trak",
        _tkhd(1, track.duration, flags=3, audio=True),
        _box(b"edts", elst),
        _box(b"tref", _box(b"chap", struct.pack(">I", 2))),
        _box(b"mdia", _mdhd(track.rate, track.media), _hdlr(b"soun", b"SoundHandler"), minf),
    )


def _chapter_trak(
    rate: int, duration: int, lengths: Sequence[int], sizes: Sequence[int], offset: int
) -> bytes:
    """The chapter track; `lengths` in milliseconds (its timescale: a chapter's 32-bit sample
    duration then holds 49 days), `duration` in samples."""
    gmhd = _box(
        b"gmhd",
        _full(b"gmin", 0, 0, struct.pack(">HHHHhH", 0x40, 0x8000, 0x8000, 0x8000, 0, 0)),
        _box(b"text", struct.pack(">9I", 0x10000, 0, 0, 0, 0x10000, 0, 0, 0, 0x40000000)),
    )
    entry = _box(b"text", bytes(6), struct.pack(">H", 1), _TEXT_ENTRY)
    stts = [struct.pack(">II", 1, n) for n in lengths]
    stbl = _box(
        b"stbl",
        _full(b"stsd", 0, 0, struct.pack(">I", 1), entry),
        _full(b"stts", 0, 0, struct.pack(">I", len(stts)), *stts),
        _stsc([len(sizes)]),
        _full(b"stsz", 0, 0, struct.pack(f">II{len(sizes)}I", 0, len(sizes), *sizes)),
        _offsets([offset], offset > _U32),
    )
    minf = _box(b"minf", gmhd, _dinf(), stbl)
    return _box(
        b"trak",
        _tkhd(2, duration, flags=2, audio=False),
        _box(b"mdia", _mdhd(1000, sum(lengths)), _hdlr(b"text", b"ChapterHandler"), minf),
    )


def _title_bytes(title: str, limit: int) -> bytes:
    """UTF-8, cut at a character boundary to at most `limit` bytes."""
    raw = title.encode("utf-8")
    if len(raw) <= limit:
        return raw
    return raw[:limit].decode("utf-8", errors="ignore").encode("utf-8")


def _udta(
    rate: int, starts: Sequence[int], titles: Sequence[str], title: str, author: str,
    cover: bytes, cover_type: str,
) -> bytes:  # fmt: skip
    parts = []
    if len(titles) <= 255:  # chpl counts its chapters in one byte
        entries = b"".join(
            struct.pack(">QB", round(start * 10_000_000 / rate), len(t)) + t
            for start, t in zip(starts, [_title_bytes(x, 255) for x in titles], strict=True)
        )
        parts.append(_full(b"chpl", 1, 0, bytes(4), bytes([len(titles)]), entries))

    def item(kind: bytes, data_type: int, value: bytes) -> bytes:
        return _box(kind, _box(b"data", struct.pack(">II", data_type, 0), value))

    items = [item(b"stik", 21, b"\x02")]
    if title:
        items += [item(b"\xa9nam", 1, title.encode()), item(b"\xa9alb", 1, title.encode())]
    if author:
        items.append(item(b"\xa9ART", 1, author.encode()))
    if cover and cover_type in _COVER_TYPES:
        items.append(item(b"covr", _COVER_TYPES[cover_type], cover))
    hdlr = _full(b"hdlr", 0, 0, bytes(4), b"mdir", b"appl", bytes(8), b"\0")
    parts.append(_full(b"meta", 0, 0, hdlr, _box(b"ilst", *items)))
    return _box(b"udta", *parts)


def m4b_head(
    track: AacTrack,
    marks: Sequence[tuple[str, int, int]],
    *,
    title: str,
    author: str,
    cover: bytes,
    cover_type: str,
) -> tuple[bytes, list[int]]:
    """The bytes before the first chapter's audio, and where each chapter's audio starts in
    the file. `marks` are the chapters as (title, start, end) on the presentation timeline,
    contiguous from 0 to `track.duration`."""
    samples = [_title_bytes(t, 1024) for t, _, _ in marks]
    text = b"".join(struct.pack(">H", len(s)) + s + _ENCD for s in samples)
    ftyp = _box(b"ftyp", b"M4B ", struct.pack(">I", 0x200), b"M4B M4A mp42isom")
    mvhd_v = int(track.duration > _U32)
    mvhd = _full(
        b"mvhd", mvhd_v, 0, _times(mvhd_v, 0, 0), struct.pack(">I", track.rate),
        _times(mvhd_v, track.duration), struct.pack(">IH", 0x10000, 0x100), bytes(10), _MATRIX,
        bytes(24), struct.pack(">I", 3),
    )  # fmt: skip
    udta = _udta(
        track.rate, [s for _, s, _ in marks], [t for t, _, _ in marks], title, author, cover,
        cover_type,
    )  # fmt: skip
    ms = [round(start * 1000 / track.rate) for _, start, _ in marks]
    lengths = [b - a for a, b in zip(ms, [*ms[1:], round(track.duration * 1000 / track.rate)],
                                      strict=True)]  # fmt: skip

    def layout(wide: bool, text_at: int, audio_at: int | None) -> tuple[bytes, list[int]]:
        """The moov; with `audio_at` None, a stand-in of the same size (offsets all 0)."""
        offsets, at = [], audio_at or 0
        for chunk in track.chunks:
            offsets.append(at)
            at += int(chunk.sum()) if audio_at is not None else 0
        moov = _box(
            b"moov",
            mvhd,
            _audio_trak(track, offsets, wide),
            _chapter_trak(
                track.rate, track.duration, lengths, [len(s) + 14 for s in samples], text_at
            ),
            udta,
        )
        return moov, offsets

    # The moov's size does not depend on the offsets' values: lay it out to learn it.
    total = track.bytes + len(text)
    moov, _ = layout(False, 0, None)
    wide = len(ftyp) + len(moov) + 8 + total > _U32
    if wide:
        moov, _ = layout(True, 0, None)
    text_at = len(ftyp) + len(moov) + (16 if wide else 8)
    moov, offsets = layout(wide, text_at, text_at + len(text))
    if wide:
        header = struct.pack(">I4sQ", 1, b"mdat", 16 + total)
    else:
        header = struct.pack(">I4s", 8 + total, b"mdat")
    return ftyp + moov + header + text, offsets
