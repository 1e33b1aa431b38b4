"""Audiobook files from chapters' audio: one m4b or mp3, planned from the frames' sizes, then
streamed chapter by chapter with its size known before the first byte.

    chapters = [AudiobookChapter(title, samples, frame_table("aac", audio)) for ...]
    plan = plan_audiobook("m4b", chapters, title="The Lighthouse", author="A. Keeper")
    plan.size                           # the file's length in bytes, before any audio is read
    for piece in plan.stream(files):    # files: per chapter, its cast's records in order
        send(piece)

Each chapter is a cast's whole file in speechd's own format (`aac` for m4b, `mp3` for mp3), so
nothing is decoded or encoded: an m4b takes the AAC frames out of their ADTS headers, an mp3
takes the frames as they are. `plan.chapter(i)` is the same per chapter, for a caller that
feeds records as they come (`feed`, then `close`, which checks the chapter held exactly the
frames the plan was made from; ValueError otherwise).

**Timing.** A chapter's audio starts `delay_samples` into its own file (`LAYOUTS`: AAC's 1024
priming samples, mp3's 1105 of encoder and decoder delay) and lasts its cast's `samples`; its
frames then run on to a whole frame.

- mp3: the frames are kept whole, and each CHAP says exactly where its chapter's audio starts
  and ends (to the millisecond) on the decoded timeline; between two chapters lie the first's
  padding and the second's delay, 50 to 75 ms of silence that no chapter claims.
- m4b: MP4 chapters have no gaps (each ends where the next starts), so the gaps go. The edit
  list cuts the first chapter's 1024 priming samples and the last one's padding. A later
  chapter's first frame (its priming) is left out of the track when it codes nothing (16
  bytes at most), which it does when the chapter's first 1024 samples (43 ms) are silence, as
  every cast's are (the engine keeps 50 ms of silence before the voice: LEAD_S); leaving it
  out then changes no sample. So each chapter's audio starts exactly at its mark, and a mark
  runs past its audio by its padding only (under 1024 samples, 43 ms). A chapter that begins
  loud keeps its first frame, so nothing is heard at the seam, and the mark before it runs
  1024 samples longer (under 86 ms in all).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import msgspec
import numpy as np

from ._formats import LAYOUTS, SAMPLE_RATE
from ._id3 import id3_tag
from ._m4b import AacTrack, m4b_head
from ._mp3 import mp3_frame_lengths
from ._standalone import adts_frame_lengths

__all__ = [
    "AUDIOBOOK_FORMATS",
    "AudiobookChapter",
    "AudiobookPlan",
    "ChapterMark",
    "frame_table",
    "plan_audiobook",
]

AUDIOBOOK_FORMATS: Final = {"m4b": ("aac", "audio/mp4"), "mp3": ("mp3", "audio/mpeg")}
"""Each audiobook format: the cast format its chapters are made in, and its media type."""

_ADTS_HEADER: Final = 7  # protection_absent: no CRC (what FFmpeg and `_containers` write)
#: ADTS bytes 2 and 3 as speechd's aac writes them: AAC-LC, 24 kHz (index 6), mono.
_ADTS_FIXED: Final = (0x58, 0x40)
_AAC_CONFIG: Final = bytes([0x13, 0x08])  # AudioSpecificConfig: AAC-LC, index 6, mono
_SILENT_FRAME: Final = 16  # an ADTS frame this short codes no spectrum: it decodes to zeros


class AudiobookChapter(msgspec.Struct, frozen=True):
    """One chapter's audio: a cast's whole file in `AUDIOBOOK_FORMATS[fmt][0]`.

    `samples`: the cast's length at SAMPLE_RATE (its PCM, without the codec's delay or padding;
    `Eos.audio_ms * 24` is within 24 samples of it). `frames`: the length of each frame of its
    file, in order, as little-endian uint16 (`frame_table`): what a plan needs of the audio."""

    title: str
    samples: int
    frames: bytes


class ChapterMark(NamedTuple):
    """Where a chapter is in the file: [start, end) in samples on the file's timeline (what a
    player shows from 0), and its audio's bytes [offset, offset + size)."""

    title: str
    start: int
    end: int
    offset: int
    size: int


def frame_table(fmt: str, data: bytes) -> bytes:
    """The frame lengths of a whole cast file in `fmt` ("aac" or "mp3"), as
    `AudiobookChapter.frames` holds them. ValueError if `data` is not whole frames."""
    if fmt == "aac":
        lengths = adts_frame_lengths(data)
    elif fmt == "mp3":
        lengths = mp3_frame_lengths(data)
    else:
        raise ValueError(f"audiobooks are made from aac or mp3 chapters, not {fmt!r}")
    if sum(lengths) != len(data):
        raise ValueError(f"this {fmt} audio does not end at a frame boundary")
    return np.asarray(lengths, dtype="<u2").tobytes()


class _Pass:
    """An mp3 chapter's bytes, passed through and counted."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._seen = 0

    def feed(self, data: bytes) -> bytes:
        if not self._seen and data[:1] not in (b"", b"\xff"):
            raise ValueError("an mp3 chapter must start at a frame")
        self._seen += len(data)
        if self._seen > self._size:
            raise ValueError(f"the chapter holds more than the {self._size} bytes planned")
        return data

    def close(self) -> None:
        if self._seen != self._size:
            raise ValueError(f"the chapter held {self._seen} bytes, not the {self._size} planned")


class _Adts:
    """An aac chapter's ADTS frames as raw AAC: headers off, the first `drop` frames left out,
    each frame's length checked against the plan."""

    def __init__(self, lengths: np.ndarray, drop: int) -> None:
        self._lengths = lengths.tolist()
        self._drop = drop
        self._index = 0
        self._held = b""

    def feed(self, data: bytes) -> bytes:
        buf = self._held + data if self._held else data
        out = []
        pos, lengths = 0, self._lengths
        while len(buf) - pos >= _ADTS_HEADER:
            if self._index >= len(lengths):
                raise ValueError("the chapter holds more frames than planned")
            b1, b2, b3 = buf[pos + 1], buf[pos + 2], buf[pos + 3]
            length = ((b3 & 0x03) << 11) | (buf[pos + 4] << 3) | (buf[pos + 5] >> 5)
            if (
                buf[pos] != 0xFF
                or b1 & 0xF7 != 0xF1
                or b2 & 0xFD != _ADTS_FIXED[0]
                or b3 & 0xC0 != _ADTS_FIXED[1]
                or buf[pos + 6] & 0x03
            ):
                raise ValueError("not an ADTS frame of speechd's aac (LC, 24 kHz, mono, no CRC)")
            if length != lengths[self._index]:
                raise ValueError(f"frame {self._index} is {length} bytes, not as planned")
            if len(buf) - pos < length:
                break
            if self._index >= self._drop:
                out.append(buf[pos + _ADTS_HEADER : pos + length])
            self._index += 1
            pos += length
        self._held = buf[pos:]
        return b"".join(out)

    def close(self) -> None:
        if self._held or self._index != len(self._lengths):
            raise ValueError(
                f"the chapter held {self._index} of the {len(self._lengths)} frames planned"
            )


@dataclass(frozen=True)
class AudiobookPlan:
    """A planned audiobook file (see the module docstring): `head` (everything before the
    first chapter's audio), then each chapter's audio; `size` bytes in all, `duration`
    samples long at `rate`."""

    format: str
    media_type: str
    head: bytes
    marks: tuple[ChapterMark, ...]
    size: int
    duration: int
    rate: int
    _tables: tuple[np.ndarray, ...]
    _drops: tuple[int, ...]

    def chapter(self, index: int) -> _Pass | _Adts:
        """What turns chapter `index`'s records into its bytes of the file."""
        if self.format == "mp3":
            return _Pass(self.marks[index].size)
        return _Adts(self._tables[index], self._drops[index])

    def stream(self, files: Iterable[Iterable[bytes]]) -> Iterator[bytes]:
        """The file's bytes: the head, then each chapter's (`files`: per chapter, its records)."""
        yield self.head
        count = 0
        for index, records in enumerate(files):
            if index >= len(self.marks):
                raise ValueError(f"more chapters given than the {len(self.marks)} planned")
            writer = self.chapter(index)
            for record in records:
                piece = writer.feed(record)
                if piece:
                    yield piece
            writer.close()
            count += 1
        if count != len(self.marks):
            raise ValueError(f"{count} chapters given, {len(self.marks)} planned")


def _tables(chapters: Sequence[AudiobookChapter]) -> list[np.ndarray]:
    if not chapters:
        raise ValueError("an audiobook needs at least one chapter")
    tables = []
    for i, chapter in enumerate(chapters):
        if len(chapter.frames) % 2 or chapter.samples < 0:
            raise ValueError(f"chapter {i}: a frame table is 2 bytes per frame")
        tables.append(np.frombuffer(chapter.frames, dtype="<u2").astype(np.int64))
    return tables


def _check(i: int, frames: int, frame: int, delay: int, samples: int, slack: int) -> None:
    """The frames must hold the chapter's samples after the codec's delay, and not much more."""
    spare = frames * frame - delay - samples
    if not 0 <= spare < slack:
        raise ValueError(
            f"chapter {i}: {frames} frames do not fit {samples} samples after a delay of {delay}"
        )


def _plan_mp3(
    chapters: Sequence[AudiobookChapter], tables: list[np.ndarray], frame: int, delay: int,
    tags: dict[str, Any],
) -> tuple[bytes, list[ChapterMark]]:  # fmt: skip
    at = byte = 0
    spans = []
    for i, (chapter, table) in enumerate(zip(chapters, tables, strict=True)):
        _check(i, len(table), frame, delay, chapter.samples, 5 * frame)
        size = int(table.sum())
        start = at + delay  # the frames are whole: its audio starts after its delay
        spans.append((chapter.title, start, start + chapter.samples, byte, size))
        at += len(table) * frame
        byte += size

    def ms(samples: int) -> int:
        return round(samples * 1000 / SAMPLE_RATE)

    def tag(audio_at: int) -> bytes:
        chaps = [(t, ms(s), ms(e), b, b + n) for t, s, e, b, n in spans]
        return id3_tag(chaps, audio_at=audio_at, **tags)

    head = tag(len(tag(0)))  # the tag's length does not depend on the offsets' values
    return head, [ChapterMark(t, s, e, len(head) + b, n) for t, s, e, b, n in spans]


def _plan_m4b(
    chapters: Sequence[AudiobookChapter], tables: list[np.ndarray], frame: int, delay: int,
    tags: dict[str, Any],
) -> tuple[bytes, list[ChapterMark], list[int]]:  # fmt: skip
    raw, spans, drops = [], [], []
    media = 0  # where the chapter's first frame in the track starts, in samples
    for i, (chapter, table) in enumerate(zip(chapters, tables, strict=True)):
        if len(table) < 2:
            raise ValueError(f"chapter {i}: an aac file has at least 2 frames")
        _check(i, len(table), frame, delay, chapter.samples, 2 * frame)
        drop = int(i > 0 and table[0] <= _SILENT_FRAME)
        raw.append(table[drop:] - _ADTS_HEADER)
        drops.append(drop)
        # Its audio starts after its priming (unless left out), less the edit's cut.
        spans.append((chapter.title, media + (1 - drop) * delay - delay))
        media += (len(table) - drop) * frame
    duration = spans[-1][1] + chapters[-1].samples
    ends = [s for _, s in spans[1:]] + [duration]
    track = AacTrack(_AAC_CONFIG, SAMPLE_RATE, raw, skip=delay, duration=duration)
    head, offsets = m4b_head(
        track, [(t, s, e) for (t, s), e in zip(spans, ends, strict=True)], **tags
    )
    marks = [
        ChapterMark(t, s, e, o, int(r.sum()))
        for (t, s), e, o, r in zip(spans, ends, offsets, raw, strict=True)
    ]
    return head, marks, drops


def plan_audiobook(
    fmt: str,
    chapters: Sequence[AudiobookChapter],
    *,
    title: str = "",
    author: str = "",
    cover: bytes = b"",
    cover_type: str = "",
) -> AudiobookPlan:
    """Plan one audiobook file in `fmt` ("m4b" or "mp3") of `chapters`, in order, each made in
    `AUDIOBOOK_FORMATS[fmt][0]`. A cover is written where it is a JPEG or PNG (`cover_type`
    "image/jpeg" or "image/png"). ValueError for chapters whose frames do not fit their
    samples."""
    if fmt not in AUDIOBOOK_FORMATS:
        raise ValueError(f"an audiobook is m4b or mp3, not {fmt!r}")
    source, media_type = AUDIOBOOK_FORMATS[fmt]
    layout = LAYOUTS[source]
    tables = _tables(chapters)
    frame, delay = layout.frame_samples, layout.delay_samples
    tags = {"title": title, "author": author, "cover": cover, "cover_type": cover_type}
    if fmt == "mp3":
        head, marks = _plan_mp3(chapters, tables, frame, delay, tags)
        drops = [0] * len(marks)
        duration = sum(len(t) for t in tables) * frame
    else:
        head, marks, drops = _plan_m4b(chapters, tables, frame, delay, tags)
        duration = marks[-1].end
    size = len(head) + sum(m.size for m in marks)
    return AudiobookPlan(
        fmt, media_type, head, tuple(marks), size, duration, SAMPLE_RATE, tuple(tables),
        tuple(drops),
    )
