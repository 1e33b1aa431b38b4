"""Audiobook files (m4b, mp3) from chapters made by speechd's own encoders, read back by ffprobe,
ffmpeg and mutagen: the chapter marks match each chapter's audio, the tags and cover read back,
the audio is each chapter's own, and the planned size is the bytes streamed."""

from __future__ import annotations

import itertools
import json
import random
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from audio_support import FFMPEG, ffmpeg_decode
from mutagen.id3 import ID3
from mutagen.mp4 import MP4

from speechd.audio import (
    SAMPLE_RATE,
    AudiobookChapter,
    frame_table,
    new_encoder,
    plan_audiobook,
)
from speechd.audio._audiobook import AudiobookPlan
from tests.books._epubs import png

FFPROBE = shutil.which("ffprobe")
pytestmark = pytest.mark.skipif(
    FFMPEG is None or FFPROBE is None, reason="needs ffmpeg (scripts/test.sh installs it)"
)

SOURCE = {"m4b": "aac", "mp3": "mp3"}
COVER = png(3, 2)
#: Chapters of uneven lengths (a whole number of frames, a sample over, under a second).
LENGTHS = (2 * SAMPLE_RATE + 333, 3 * SAMPLE_RATE + 1000, 12_345, SAMPLE_RATE + 1)
TONES = (300.0, 500.0, 700.0, 900.0)
LEAD = 1200  # the silence every cast starts with (the engine keeps 50 ms before the voice)


def tone(n: int, freq: float, lead: int = LEAD) -> np.ndarray:
    pcm = (0.4 * np.sin(2 * np.pi * freq * np.arange(n) / SAMPLE_RATE)).astype(np.float32)
    pcm[:lead] = 0
    return pcm


def cast(fmt: str, pcm: np.ndarray) -> list[bytes]:
    """A cast's records: its audio in three uneven chunks, then the final flush."""
    encoder = new_encoder(fmt)
    cuts = [0, len(pcm) // 3, len(pcm) // 3 + 7, len(pcm)]
    records = [encoder.encode(pcm[a:b]) for a, b in itertools.pairwise(cuts)]
    return [*records, encoder.encode(np.zeros(0, np.float32), final=True)]


def book(
    fmt: str, lengths=LENGTHS, tones=TONES, lead: int = LEAD, titles: list[str] | None = None
) -> tuple[AudiobookPlan, list[list[bytes]], list[np.ndarray]]:
    chapters, files, pcms = [], [], []
    for i, (n, freq) in enumerate(zip(lengths, tones, strict=True)):
        pcm = tone(n, freq, lead)
        records = cast(SOURCE[fmt], pcm)
        title = titles[i] if titles else f"Chapter {i + 1}: «{freq:g} Hz»"
        chapters.append(AudiobookChapter(title, n, frame_table(SOURCE[fmt], b"".join(records))))
        files.append(records)
        pcms.append(pcm)
    plan = plan_audiobook(
        fmt, chapters, title="The Lighthouse", author="Ada Keeper", cover=COVER,
        cover_type="image/png",
    )  # fmt: skip
    return plan, files, pcms


def probe(data: bytes, suffix: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"book.{suffix}"
        path.write_bytes(data)
        done = subprocess.run(
            [FFPROBE, "-v", "error", "-show_chapters", "-show_format", "-of", "json", str(path)],
            capture_output=True, check=True, timeout=60,
        )  # fmt: skip
    assert done.stderr == b"", done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("fmt", ["m4b", "mp3"])
def test_chapter_marks_match_each_chapters_audio_in_ffprobe(fmt: str) -> None:
    plan, files, _ = book(fmt)
    data = b"".join(plan.stream(files))
    found = probe(data, fmt)
    chapters = found["chapters"]
    assert [c["tags"]["title"] for c in chapters] == [m.title for m in plan.marks]
    for chapter, n in zip(chapters, LENGTHS, strict=True):
        length = float(chapter["end_time"]) - float(chapter["start_time"])
        assert abs(length - n / SAMPLE_RATE) < 0.050, (chapter, n)
    starts = [float(c["start_time"]) for c in chapters]
    assert starts == sorted(starts)
    assert found["format"]["tags"]["title"] == "The Lighthouse"
    assert found["format"]["tags"]["artist"] == "Ada Keeper"
    assert float(found["format"]["duration"]) == pytest.approx(
        plan.duration / SAMPLE_RATE, abs=0.002
    )


@pytest.mark.parametrize("fmt", ["m4b", "mp3"])
def test_the_decoded_file_is_each_chapters_own_audio_at_its_mark(fmt: str) -> None:
    """Decoding the whole book gives, from each chapter's mark on, exactly what decoding that
    chapter's own file gives (its codec delay cut): nothing is re-encoded, lost or shifted."""
    plan, files, pcms = book(fmt)
    decoded, errors = ffmpeg_decode(fmt, b"".join(plan.stream(files)))
    assert errors == ""
    if fmt == "mp3":
        assert len(decoded) == plan.duration
    else:  # ffmpeg plays the last frame whole: the edit's end cuts less than a frame
        assert plan.duration <= len(decoded) < plan.duration + 1024
    delay = 1024 if fmt == "m4b" else 1105
    for mark, records, pcm in zip(plan.marks, files, pcms, strict=True):
        own, _ = ffmpeg_decode(SOURCE[fmt], b"".join(records))
        here = decoded[mark.start : mark.start + len(pcm)]
        assert np.abs(here - own[delay : delay + len(pcm)]).max() < 1e-4, mark
        assert np.abs(here - pcm).max() < 0.05, mark  # the tone itself, at its place


def test_a_chapter_that_starts_loud_keeps_its_priming_and_stays_exact() -> None:
    plan, files, pcms = book("m4b", lead=0)
    decoded, _ = ffmpeg_decode("m4b", b"".join(plan.stream(files)))
    for mark, records, pcm in zip(plan.marks, files, pcms, strict=True):
        own, _ = ffmpeg_decode("aac", b"".join(records))
        here = decoded[mark.start : mark.start + len(pcm)]
        assert np.abs(here - own[1024 : 1024 + len(pcm)]).max() < 1e-4, mark
    lengths = [m.end - m.start for m in plan.marks]
    assert all(0 <= got - n < 2048 + 1024 for got, n in zip(lengths, LENGTHS, strict=True))


def test_m4b_tags_cover_and_chapters_read_back_in_mutagen() -> None:
    plan, files, _ = book("m4b")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "book.m4b"
        path.write_bytes(b"".join(plan.stream(files)))
        found = MP4(path)
    assert found.tags["©nam"] == ["The Lighthouse"]
    assert found.tags["©alb"] == ["The Lighthouse"]
    assert found.tags["©ART"] == ["Ada Keeper"]
    assert found.tags["stik"] == [2]  # an audiobook
    assert bytes(found.tags["covr"][0]) == COVER
    assert found.tags["covr"][0].imageformat == found.tags["covr"][0].FORMAT_PNG
    assert [c.title for c in found.chapters] == [m.title for m in plan.marks]
    for chapter, mark in zip(found.chapters, plan.marks, strict=True):
        assert chapter.start == pytest.approx(mark.start / SAMPLE_RATE, abs=1e-6)
    assert found.info.codec == "mp4a.40.2" and found.info.sample_rate == SAMPLE_RATE


def test_mp3_tags_cover_and_chapters_read_back_in_mutagen() -> None:
    plan, files, _ = book("mp3")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "book.mp3"
        data = b"".join(plan.stream(files))
        path.write_bytes(data)
        tag = ID3(path)
    assert tag.version[:2] == (2, 4)
    assert str(tag["TIT2"]) == "The Lighthouse" and str(tag["TPE1"]) == "Ada Keeper"
    assert tag["APIC:"].data == COVER and tag["APIC:"].mime == "image/png"
    toc = tag["CTOC:toc"]
    assert toc.child_element_ids == [f"ch{i}" for i in range(len(LENGTHS))]
    for i, (mark, n) in enumerate(zip(plan.marks, LENGTHS, strict=True)):
        chap = tag[f"CHAP:ch{i}"]
        assert str(chap.sub_frames["TIT2"]) == mark.title
        assert abs(chap.start_time - mark.start * 1000 / SAMPLE_RATE) <= 0.5
        assert abs((chap.end_time - chap.start_time) - n * 1000 / SAMPLE_RATE) <= 1
        # The offsets point at the chapter's first frame and past its last one.
        assert (chap.start_offset, chap.end_offset) == (mark.offset, mark.offset + mark.size)
        assert data[chap.start_offset] == 0xFF


@pytest.mark.parametrize("fmt", ["m4b", "mp3"])
def test_the_planned_size_is_what_streams_however_records_are_cut(fmt: str) -> None:
    plan, files, _ = book(fmt)
    whole = b"".join(plan.stream(files))
    assert len(whole) == plan.size
    rng = random.Random(7)
    recut = []
    for records in files:  # the same bytes in other pieces, one byte at a time in places
        blob, pieces, at = b"".join(records), [], 0
        while at < len(blob):
            step = rng.choice([1, 5, 100, 4000])
            pieces.append(blob[at : at + step])
            at += step
        recut.append(pieces)
    assert b"".join(plan.stream(recut)) == whole
    # Fed chapter by chapter, as a caller with records arriving over time would.
    pieces = [plan.head]
    for index, records in enumerate(files):
        writer = plan.chapter(index)
        pieces += [writer.feed(record) for record in records]
        writer.close()
    assert b"".join(pieces) == whole
    for index, (mark, records) in enumerate(zip(plan.marks, files, strict=True)):
        writer = plan.chapter(index)
        own = b"".join(writer.feed(record) for record in records)
        assert whole[mark.offset : mark.offset + mark.size] == own


@pytest.mark.parametrize("fmt", ["m4b", "mp3"])
def test_a_chapter_that_is_not_what_was_planned_is_refused(fmt: str) -> None:
    plan, files, _ = book(fmt)
    short = [files[0], files[1][:-2], *files[2:]]  # chapter 2 lost its last records
    with pytest.raises(ValueError, match="planned"):
        b"".join(plan.stream(short))
    swapped = [files[1], files[0], *files[2:]]
    with pytest.raises(ValueError, match="planned"):
        b"".join(plan.stream(swapped))
    with pytest.raises(ValueError, match="planned"):
        b"".join(plan.stream(files[:-1]))


def test_frames_that_cannot_hold_the_samples_are_refused() -> None:
    records = cast("aac", tone(5000, 440.0))
    table = frame_table("aac", b"".join(records))
    with pytest.raises(ValueError, match="do not fit"):
        plan_audiobook("m4b", [AudiobookChapter("One", 50_000, table)])
    with pytest.raises(ValueError, match="frame boundary"):
        frame_table("aac", b"".join(records)[:-3])


def test_more_chapters_than_one_table_holds() -> None:
    """300 chapters: the mp3 nests its CTOC (255 entries each), the m4b leaves out the Nero
    list (255 at most) and keeps the QuickTime chapter track ffprobe reads."""
    n = 300
    lengths = [2400 + 37 * i for i in range(n)]
    tones = [200.0 + 3 * i for i in range(n)]
    titles = [f"Part {i}" for i in range(n)]
    for fmt in ("mp3", "m4b"):
        plan, files, _ = book(fmt, lengths, tones, titles=titles)
        data = b"".join(plan.stream(files))
        found = probe(data, fmt)["chapters"]
        assert [c["tags"]["title"] for c in found] == titles
        if fmt == "mp3":
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "book.mp3"
                path.write_bytes(data)
                tag = ID3(path)
            assert tag["CTOC:toc"].child_element_ids == ["toc0", "toc1"]
            assert len(tag["CTOC:toc1"].child_element_ids) == n - 255
        else:
            assert b"chpl" not in plan.head


def _boxes(data: bytes, start: int, end: int) -> dict[bytes, tuple[int, int]]:
    found, at = {}, start
    while at + 8 <= end:
        size, kind = struct.unpack_from(">I4s", data, at)
        header = 8
        if size == 1:
            (size,) = struct.unpack_from(">Q", data, at + 8)
            header = 16
        found[kind] = (at + header, at + size)
        at += size
    return found


def test_an_m4b_over_4_gib_is_planned_with_64_bit_offsets() -> None:
    """Planned from frame sizes alone (no audio is made): a 70-hour book at a high rate."""
    frames = 6_000_000  # 1024 samples each: 71 hours
    table = np.full(frames, 800, dtype="<u2")
    chapters = [
        AudiobookChapter("One", (frames - 1) * 1024 - 100, table.tobytes()),
        AudiobookChapter("Two", 1000, np.array([11, 400], dtype="<u2").tobytes()),
    ]
    plan = plan_audiobook("m4b", chapters)
    assert plan.size > 1 << 32
    top = _boxes(plan.head, 0, len(plan.head))
    assert list(top) == [b"ftyp", b"moov", b"mdat"]
    assert top[b"mdat"] == (len(plan.head) - _text_bytes(plan), plan.size)  # a 64-bit mdat
    assert b"co64" in plan.head and b"stco" in plan.head  # audio 64-bit, chapter titles not
    assert plan.marks[1].offset > 1 << 32


def _text_bytes(plan: AudiobookPlan) -> int:
    return sum(len(m.title.encode()) + 14 for m in plan.marks)
