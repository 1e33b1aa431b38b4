"""The package surface: names, formats, media types, errors and input handling."""

from __future__ import annotations

import types

import numpy as np
import pytest

import speechd.audio as audio
from speechd.audio import (
    FORMATS,
    LAYOUTS,
    SAMPLE_RATE,
    content_type,
    new_encoder,
)
from speechd.audio._base import Encoder, EncoderFinished
from speechd.errors import InvalidRequest


def test_all_is_the_public_surface() -> None:
    public = {
        name
        for name, obj in vars(audio).items()
        if not name.startswith("_") and not isinstance(obj, types.ModuleType)
    }
    assert set(audio.__all__) == public
    for name in audio.__all__:
        obj = getattr(audio, name)
        if isinstance(obj, type):
            assert obj.__module__ == "speechd.audio"


def test_formats_and_content_types() -> None:
    assert FORMATS == ("mp3", "opus", "aac", "flac", "wav", "pcm")
    assert SAMPLE_RATE == 24000
    assert [content_type(f) for f in FORMATS] == [
        "audio/mpeg",
        "audio/ogg",
        "audio/aac",
        "audio/flac",
        "audio/wav",
        "audio/pcm",
    ]
    assert set(LAYOUTS) == set(FORMATS)
    assert all(LAYOUTS[f].format == f for f in FORMATS)
    assert LAYOUTS["mp3"].to_json()["frame_bytes"] == 192


@pytest.mark.parametrize("call", [new_encoder, content_type])
@pytest.mark.parametrize("fmt", ["ogg", "MP3", "", "vorbis"])
def test_unknown_format_is_an_invalid_request(call, fmt: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        call(fmt)
    assert info.value.param == "response_format"
    assert info.value.status == 400
    assert "mp3" in info.value.message


def test_unsupported_sample_rate() -> None:
    with pytest.raises(ValueError, match="sample_rate"):
        new_encoder("wav", 22050)


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_encoder_follows_the_protocol(fmt: str) -> None:
    encoder = new_encoder(fmt)
    assert isinstance(encoder, Encoder)
    assert encoder.format == fmt
    assert encoder.sample_rate == SAMPLE_RATE
    assert fmt in repr(encoder)


@pytest.mark.parametrize("fmt", FORMATS)
def test_finished_encoder_refuses_more(fmt: str) -> None:
    encoder = new_encoder(fmt)
    encoder.encode(np.zeros(100, np.float32), final=True)
    with pytest.raises(EncoderFinished):
        encoder.encode(np.zeros(100, np.float32))
    with pytest.raises(EncoderFinished):
        encoder.encode(np.zeros(0, np.float32), final=True)


def test_first_call_carries_the_header() -> None:
    for fmt in FORMATS:
        data = new_encoder(fmt).encode(np.zeros(0, np.float32))
        assert len(data) == LAYOUTS[fmt].header_bytes, fmt
    assert new_encoder("wav").encode([]).startswith(b"RIFF")
    assert new_encoder("flac").encode([]).startswith(b"fLaC")
    assert new_encoder("opus").encode([])[28:36] == b"OpusHead"


def test_pcm_is_clipped_rounded_s16le() -> None:
    pcm = np.array([0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -3.0, np.nan, np.inf, 0.75 / 32767], np.float32)
    data = new_encoder("pcm").encode(pcm, final=True)
    samples = np.frombuffer(data, "<i2").tolist()
    assert samples == [0, 16384, -16384, 32767, -32767, 32767, -32767, 0, 32767, 1]


def test_wav_is_header_plus_pcm() -> None:
    pcm = np.linspace(-1, 1, 1001, dtype=np.float32)
    wav = new_encoder("wav").encode(pcm, final=True)
    assert wav[44:] == new_encoder("pcm").encode(pcm, final=True)
    assert wav[4:8] == b"\xff\xff\xff\xff"  # RIFF size: unknown
    assert wav[36:44] == b"data\xff\xff\xff\xff"  # data size: unknown


def test_input_shapes_and_types() -> None:
    encoder = new_encoder("pcm")
    assert encoder.encode(np.zeros((1, 3), np.float64)) == b"\x00" * 6  # (1, n) is mono
    assert encoder.encode([0.0, 0.0]) == b"\x00" * 4
    with pytest.raises(ValueError, match="mono"):
        encoder.encode(np.zeros((2, 3), np.float32))
    with pytest.raises(TypeError, match="floats"):
        encoder.encode(np.zeros(3, np.int16))
