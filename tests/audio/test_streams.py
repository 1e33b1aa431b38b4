"""Every format, fed in uneven chunks, makes one valid, gapless, deterministic file.

Decoded with the ffmpeg command line (installed by scripts/test.sh), independent of the PyAV
build that encodes.
"""

from __future__ import annotations

import hashlib
import itertools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speechd.audio import FORMATS, LAYOUTS, SAMPLE_RATE, new_encoder
from speechd.audio._mp3 import mp3_frame_lengths
from speechd.audio._standalone import adts_frame_lengths, ogg_pages
from tests.audio._support import (
    CHUNKS,
    FFMPEG,
    boundaries,
    decode_timeline,
    encode_chunks,
    ffmpeg_decode,
    sine,
    speech_like,
)

pytestmark = pytest.mark.skipif(FFMPEG is None, reason="needs ffmpeg (scripts/test.sh installs it)")

N = sum(CHUNKS)
LOSSLESS = ("flac", "wav", "pcm")
WINDOW = SAMPLE_RATE // 100  # 10 ms either side of a boundary


def _similarity(a: np.ndarray, b: np.ndarray) -> float:
    """Normalised correlation: 1.0 for identical shapes, whatever the level."""
    return float(np.dot(a, b) / np.sqrt(np.dot(a, a) * np.dot(b, b)))


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    return speech_like(N)


@pytest.mark.parametrize("fmt", FORMATS)
def test_records_concatenate_to_one_valid_file(fmt: str, speech: np.ndarray) -> None:
    data = b"".join(encode_chunks(fmt, speech))
    decoded, errors = ffmpeg_decode(fmt, data, rate=SAMPLE_RATE if fmt == "opus" else None)
    assert errors == ""  # `ffmpeg -v error` has nothing to say
    extra = len(decoded) - LAYOUTS[fmt].delay_samples - N
    if fmt in LOSSLESS or fmt == "opus":
        assert extra == 0  # Ogg's end granule trims Opus's padding exactly
    else:
        assert 0 <= extra < LAYOUTS[fmt].frame_samples  # padding to a whole frame, no more


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_cast_without_samples_is_still_a_file(fmt: str) -> None:
    """An empty final chunk as the only call still makes a file decoders accept (silence of at
    most two codec frames)."""
    data = new_encoder(fmt).encode(np.zeros(0, np.float32), final=True)
    assert len(data) >= LAYOUTS[fmt].header_bytes
    decoded, errors = ffmpeg_decode(fmt, data)
    assert errors == ""
    assert not decoded.any()
    assert len(decoded) <= 2 * LAYOUTS[fmt].frame_samples


@pytest.mark.parametrize("fmt", FORMATS)
def test_chunking_changes_no_byte(fmt: str, speech: np.ndarray) -> None:
    """The encoder runs continuously across chunks: the records concatenate to exactly the file
    of encoding the whole PCM in one call, so chunk boundaries cannot be heard."""
    records = encode_chunks(fmt, speech)
    assert b"".join(records) == new_encoder(fmt).encode(speech, final=True)


@settings(max_examples=15, deadline=None)
@given(
    fmt=st.sampled_from(FORMATS),
    cuts=st.lists(st.integers(0, 12_000), min_size=1, max_size=8).map(sorted),
)
def test_any_chunking_gives_the_same_file(fmt: str, cuts: list[int]) -> None:
    pcm = speech_like(12_000, seed=1)
    edges = [0, *cuts, len(pcm)]
    chunks = [b - a for a, b in itertools.pairwise(edges)]
    assert b"".join(encode_chunks(fmt, pcm, chunks)) == new_encoder(fmt).encode(pcm, final=True)


@pytest.mark.parametrize("fmt", FORMATS)
def test_same_chunks_give_the_same_bytes(fmt: str, speech: np.ndarray) -> None:
    assert encode_chunks(fmt, speech) == encode_chunks(fmt, speech)


def test_a_fresh_process_gives_the_same_bytes(speech: np.ndarray) -> None:
    """Nothing random or process-specific (Ogg serial, timestamps, seeds) reaches the bytes."""
    script = (
        "import hashlib, sys\n"
        "sys.path[:0] = [sys.argv[1], sys.argv[2]]\n"
        "from tests.audio._support import CHUNKS, encode_chunks, speech_like\n"
        "from speechd.audio import FORMATS\n"
        "pcm = speech_like(sum(CHUNKS))\n"
        "for f in FORMATS:\n"
        "    print(hashlib.sha256(b''.join(encode_chunks(f, pcm))).hexdigest())\n"
    )
    here = Path(__file__).parent
    done = subprocess.run(
        [sys.executable, "-c", script, str(here), str(here.parent.parent)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    mine = [hashlib.sha256(b"".join(encode_chunks(f, speech))).hexdigest() for f in FORMATS]
    assert done.stdout.split() == mine


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_continuous_sine_stays_continuous(fmt: str) -> None:
    """At every chunk boundary the decoded 440 Hz sine keeps its level and its phase."""
    x = sine(N)
    decoded = decode_timeline(fmt, b"".join(encode_chunks(fmt, x)))
    for b in boundaries():
        if not WINDOW <= b <= N - WINDOW:
            continue
        got, want = decoded[b - WINDOW : b + WINDOW], x[b - WINDOW : b + WINDOW]
        level_db = 20 * np.log10(np.sqrt(np.mean(got**2) / np.mean(want**2)))
        assert abs(level_db) < 1.0, (b, level_db)  # no gap, no doubled audio
        correlation = _similarity(got, want)
        assert correlation > 0.999, (b, correlation)  # no phase jump, no click
        if fmt in LOSSLESS:
            assert np.abs(got - want).max() <= 1 / 32767


@pytest.mark.parametrize("fmt", FORMATS)
def test_speech_stays_aligned_across_boundaries(fmt: str, speech: np.ndarray) -> None:
    """Right after each boundary the decoded signal lines up with the source at lag 0 (no
    samples dropped or inserted) and matches it closely."""
    decoded = decode_timeline(fmt, b"".join(encode_chunks(fmt, speech)))
    for b in boundaries():
        if not 60 <= b <= N - 2 * WINDOW - 60:
            continue
        want = speech[b : b + 2 * WINDOW]
        lags = range(-50, 51)
        scores = [_similarity(decoded[b + lag : b + lag + 2 * WINDOW], want) for lag in lags]
        assert lags[int(np.argmax(scores))] == 0, b
        correlation = _similarity(decoded[b : b + 2 * WINDOW], want)
        assert correlation > (0.99999 if fmt in LOSSLESS else 0.98), (b, correlation)


@pytest.mark.parametrize("fmt", ["mp3", "aac", "opus"])
def test_records_hold_whole_frames_or_pages(fmt: str, speech: np.ndarray) -> None:
    records = encode_chunks(fmt, speech)
    if fmt == "opus":  # one 60 ms packet (2880 samples at 48 kHz) per page, but the last
        granules = [granule for record in records for _, granule in ogg_pages(record)]
        assert granules[:2] == [0, 0]  # OpusHead, OpusTags
        assert set(np.diff(granules[2:-1])) == {2880}
        assert granules[-1] == 2 * N + 312  # the true end (pre-skip 312): decoders trim to it
    for i, record in enumerate(records):
        if fmt == "mp3":
            units = mp3_frame_lengths(record)
            assert all(n == LAYOUTS["mp3"].frame_bytes for n in units)
            assert i > 0 or len(units) >= 2  # Chromium decodes no 1-frame mp3
        elif fmt == "aac":
            units = adts_frame_lengths(record)
            assert i > 0 or len(units) >= 3
        else:
            pages = ogg_pages(record)
            units = [length for length, _ in pages]
        assert sum(units) == len(record), (i, len(record))


@pytest.mark.parametrize(("fmt", "least"), [("mp3", 2), ("aac", 3)])
def test_tiny_first_chunks_are_held_back_until_decodable(fmt: str, least: int) -> None:
    """Record 0 holds at least `least` frames (Chromium decodes no fewer), even when the first
    chunks are tiny; later records may hold a single frame."""
    split = mp3_frame_lengths if fmt == "mp3" else adts_frame_lengths
    encoder = new_encoder(fmt)
    outputs = [encoder.encode(sine(100)) for _ in range(120)]
    first = next(i for i, out in enumerate(outputs) if out)
    assert len(split(outputs[first])) >= least
    assert any(len(split(out)) == 1 for out in outputs[first + 1 :])
