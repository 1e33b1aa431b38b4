"""Each record decodes on its own, as the package docstring's contract says (ffmpeg here; the
same in Chromium in test_browser.py)."""

from __future__ import annotations

import numpy as np
import pytest

from speechd.audio import FORMATS, LAYOUTS, standalone_record
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


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    return speech_like(N)


def _ffmpeg(fmt: str):
    container = "wav" if fmt == "pcm" else fmt  # standalone pcm records come as wav

    def decode(data: bytes) -> np.ndarray:
        samples, errors = ffmpeg_decode(container, data)
        assert errors == ""
        return samples

    return decode


@pytest.mark.parametrize("fmt", FORMATS)
def test_records_decoded_alone_give_the_whole_file(fmt: str, speech: np.ndarray) -> None:
    records = encode_chunks(fmt, speech)
    whole = _ffmpeg(fmt)(standalone_record(fmt, b"", b"".join(records)).data)
    pieces = decode_records(fmt, records, _ffmpeg(fmt))
    joined = np.concatenate(pieces)
    assert len(joined) == len(whole)
    if LAYOUTS[fmt].exact:
        np.testing.assert_array_equal(joined, whole)
    else:  # opus: a fresh decoder after 480 ms of pre-roll, not bit-exact
        assert np.abs(joined - whole).max() < 2e-3


def test_mp3_contract_in_bytes(speech: np.ndarray) -> None:
    """The recipe as a player implements it, with no parsing: every frame is 192 bytes."""
    layout = LAYOUTS["mp3"]
    records = encode_chunks("mp3", speech)
    decode = _ffmpeg("mp3")
    whole = decode(b"".join(records))
    prior = b""
    position = 0
    for record in records:
        if record:
            preroll = prior[-layout.preroll * layout.frame_bytes :] if prior else b""
            samples = decode(preroll + record)
            keep = len(record) // layout.frame_bytes * layout.frame_samples
            assert len(samples) == (len(preroll) + len(record)) // 192 * 576
            np.testing.assert_array_equal(
                samples[len(samples) - keep :], whole[position : position + keep]
            )
            position += keep
        prior += record
    assert position == len(whole)


def test_three_mp3_preroll_frames_are_not_enough() -> None:
    """Why the pre-roll is 4 frames: with 3, the bit reservoir can reach back past the first
    pre-roll frame, and record k's first samples come out wrong."""
    rng = np.random.default_rng(3)
    noisy = (0.3 * rng.standard_normal(N)).astype(np.float32)
    records = encode_chunks("mp3", noisy)
    decode = _ffmpeg("mp3")
    whole = decode(b"".join(records))
    worst = {3: 0.0, 4: 0.0}
    for frames in worst:
        prior = b""
        position = 0
        for record in records:
            if record:
                preroll = prior[-frames * 192 :] if prior else b""
                keep = len(record) // 192 * 576
                got = decode(preroll + record)[-keep:]
                error = np.abs(got - whole[position : position + keep]).max()
                worst[frames] = max(worst[frames], float(error))
                position += keep
            prior += record
    assert worst[4] == 0.0
    assert worst[3] > 0.01


def test_records_without_audio_are_skipped() -> None:
    for fmt in FORMATS:
        assert standalone_record(fmt, b"x", b"") is None
    header = encode_chunks("flac", np.zeros(10, np.float32), [10])[0][:60]
    assert standalone_record("flac", b"", header) is None  # record 0 with the header only
