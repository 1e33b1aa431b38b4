"""Checkpoints: a file continued by a new encoder is still one valid file, of the same length,
and every record still decodes on its own; lossless formats continue byte for byte, lossy ones
with a fresh codec whose splice is measured here (the figures in speechd/audio/_resume.py)."""

from __future__ import annotations

import io
import struct
import subprocess
import tempfile
import wave
from pathlib import Path

import numpy as np
import pytest

from speechd.audio import FORMATS, LAYOUTS, SAMPLE_RATE, new_encoder
from speechd.audio._containers import adts_header, ogg_page
from speechd.audio._factory import encoder_fingerprint
from speechd.audio._resume import SPLICE, load
from speechd.audio._standalone import adts_frame_lengths, ogg_pages
from tests.audio._support import (
    CHUNKS,
    FFMPEG,
    decode_records,
    encode_chunks,
    ffmpeg_decode,
    speech_like,
)

pytestmark = pytest.mark.skipif(FFMPEG is None, reason="needs ffmpeg (scripts/test.sh installs it)")

N = sum(CHUNKS)
EXACT = ("flac", "wav", "pcm")


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    return speech_like(N)


def spliced(
    fmt: str, pcm: np.ndarray, at: set[int], chunks=CHUNKS
) -> tuple[list[bytes], list[int]]:
    """The records of one cast whose encoder is replaced from its checkpoint before each chunk
    index in `at`; and where (timeline samples) each splice fell."""
    encoder = new_encoder(fmt)
    records, splices = [], []
    pos = 0
    for i, n in enumerate(chunks):
        if i in at:
            checkpoint = encoder.checkpoint()
            splices.append(load(checkpoint).covered)
            encoder = new_encoder(fmt, resume=checkpoint)
        records.append(encoder.encode(pcm[pos : pos + n], final=i == len(chunks) - 1))
        pos += n
    return records, splices


def strict_decode(fmt: str, data: bytes) -> np.ndarray:
    """Decode with ffmpeg -xerror: any error in the stream fails. (Not wav: ffmpeg calls the
    end of a streaming wav, whose header says "length unknown", a corrupt packet; the `wave`
    module checks those files.)"""
    assert FFMPEG
    if fmt == "wav":
        samples, errors = ffmpeg_decode(fmt, data)
        assert errors == ""
        return samples
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"cast.{fmt}"
        path.write_bytes(data)
        raw = ["-f", "s16le", "-ar", str(SAMPLE_RATE), "-ac", "1"] if fmt == "pcm" else []
        done = subprocess.run(
            [
                FFMPEG,
                "-nostdin",
                "-v",
                "error",
                "-xerror",
                *raw,
                "-i",
                str(path),
                "-f",
                "f32le",
                "-",
            ],
            capture_output=True,
            check=False,
            timeout=60,
        )
    assert done.returncode == 0 and not done.stderr, done.stderr.decode(errors="replace")
    return np.frombuffer(done.stdout, dtype=np.float32)


def timeline(fmt: str, data: bytes) -> np.ndarray:
    samples, errors = ffmpeg_decode(fmt, data, rate=SAMPLE_RATE if fmt == "opus" else None)
    assert errors == ""
    delay = 0 if fmt == "opus" else LAYOUTS[fmt].delay_samples
    return samples[delay:]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("at", [{1}, {2}, {3}, {5}, {2, 4, 6}, set(range(1, len(CHUNKS)))])
def test_a_continued_file_is_one_valid_file_of_the_same_length(
    fmt: str, at: set[int], speech: np.ndarray
) -> None:
    whole = b"".join(encode_chunks(fmt, speech))
    records, _ = spliced(fmt, speech, at)
    data = b"".join(records)
    if fmt in EXACT:
        assert data == whole
    assert len(strict_decode(fmt, data)) == len(strict_decode(fmt, whole))
    if fmt == "wav":
        with wave.open(io.BytesIO(data)) as w:
            assert w.getframerate() == SAMPLE_RATE
            assert len(w.readframes(N + 10)) == 2 * N


@pytest.mark.parametrize("fmt", FORMATS)
def test_records_after_a_splice_still_decode_on_their_own(fmt: str, speech: np.ndarray) -> None:
    records, _ = spliced(fmt, speech, {2, 5})

    def decode(data: bytes) -> np.ndarray:
        samples, errors = ffmpeg_decode("wav" if fmt == "pcm" else fmt, data)
        assert errors == ""
        return samples

    whole = decode(b"".join(records) if fmt != "pcm" else _as_wav(b"".join(records)))
    joined = np.concatenate(decode_records(fmt, records, decode))
    assert len(joined) == len(whole)
    if LAYOUTS[fmt].exact:
        np.testing.assert_array_equal(joined, whole)
    else:
        assert np.abs(joined - whole).max() < 2e-3


def _as_wav(pcm: bytes) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(pcm)
    return buf.getvalue()


# What the module docstring promises, with room: the coding error in the 100 ms after the splice
# against the uninterrupted file's there (both against the PCM), and the largest difference
# between the two files anywhere.
BOUNDS = {"mp3": (2.0, 0.12), "aac": (3.0, 0.25), "opus": (5.0, 0.5)}


@pytest.mark.parametrize("fmt", sorted(BOUNDS))
def test_the_lossy_splice_stays_within_its_measured_artefact(fmt: str, speech: np.ndarray) -> None:
    ratio_bound, peak_bound = BOUNDS[fmt]
    uninterrupted = timeline(fmt, b"".join(encode_chunks(fmt, speech)))[:N]
    window = SAMPLE_RATE // 10
    ratios, peaks = [], []
    for at in (2, 4, 5, 6):
        records, (covered,) = spliced(fmt, speech, {at})
        decoded = timeline(fmt, b"".join(records))[:N]
        assert len(decoded) == len(uninterrupted)
        span = slice(covered, covered + window)
        err = np.sqrt(np.mean((decoded[span] - speech[span]) ** 2))
        base = np.sqrt(np.mean((uninterrupted[span] - speech[span]) ** 2))
        ratios.append(err / base)
        peaks.append(np.abs(decoded - uninterrupted).max())
    print(fmt, "error ratio after the splice", np.round(ratios, 2), "peaks", np.round(peaks, 3))
    assert max(ratios) < ratio_bound
    assert max(peaks) < peak_bound


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_checkpoint_before_any_bytes_replays_the_input(fmt: str, speech: np.ndarray) -> None:
    tiny = (300, 200, 50_000 - 500, 0)  # mp3 and aac hold such a first record back
    whole = b"".join(encode_chunks(fmt, speech[:50_000], tiny))
    records, _ = spliced(fmt, speech[:50_000], {1, 2}, tiny)
    if fmt in ("mp3", "aac"):
        assert records[0] == b""
    if fmt in ("mp3", "flac", "wav", "pcm"):  # aac and opus: the replay is of s16 input
        assert records[:2] == encode_chunks(fmt, speech[:50_000], tiny)[:2]
    assert len(strict_decode(fmt, b"".join(records))) == len(strict_decode(fmt, whole))


@pytest.mark.parametrize("fmt", FORMATS)
def test_checkpoints_are_small_and_say_what_they_continue(fmt: str, speech: np.ndarray) -> None:
    encoder = new_encoder(fmt)
    sizes = []
    pos = 0
    for n in CHUNKS[:-1]:
        encoder.encode(speech[pos : pos + n])
        pos += n
        sizes.append(len(encoder.checkpoint()))
    splice = SPLICE.get(fmt)
    preroll = splice.preroll if splice else 0
    assert max(sizes) < 2 * (preroll + 4000) + 100  # held-back audio + pre-roll, as s16
    assert encoder.fingerprint == encoder_fingerprint(fmt)
    with pytest.raises(ValueError):
        new_encoder("wav" if fmt != "wav" else "pcm", resume=encoder.checkpoint())
    with pytest.raises(ValueError):
        new_encoder(fmt, resume=b"not a checkpoint")


def test_pages_and_headers_written_after_a_splice_are_the_muxers(speech: np.ndarray) -> None:
    """The Ogg pages and ADTS headers a continued file writes itself are byte for byte what
    FFmpeg's muxers write for the same packet (so their CRCs and fields are right)."""
    opus = b"".join(encode_chunks("opus", speech))
    at = LAYOUTS["opus"].header_bytes
    for length, granule in ogg_pages(opus[at:])[:-1]:
        page = opus[at : at + length]
        segments = page[26]
        packet = page[27 + segments :]
        (serial,) = struct.unpack_from("<I", page, 14)
        (sequence,) = struct.unpack_from("<I", page, 18)
        eos = bool(page[5] & 4)
        assert ogg_page(packet, granule=granule, serial=serial, sequence=sequence, eos=eos) == page
        at += length
    aac = b"".join(encode_chunks("aac", speech))
    at = 0
    for length in adts_frame_lengths(aac):
        assert adts_header(length - 7, SAMPLE_RATE) == aac[at : at + 7]
        at += length
