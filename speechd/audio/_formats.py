"""The response formats speechd can encode, their media types, and the fixed facts a player needs
to decode one record of a cast on its own (`RecordLayout`, explained in the package docstring)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from types import MappingProxyType
from typing import Final

from speechd.errors import InvalidRequest

__all__ = [
    "FORMATS",
    "LAYOUTS",
    "MP3_BITRATE_KBPS",
    "SAMPLE_RATE",
    "SAMPLE_RATES",
    "RecordLayout",
    "check_format",
    "content_type",
]

FORMATS: Final[tuple[str, ...]] = ("mp3", "opus", "aac", "flac", "wav", "pcm")
"""OpenAI's `response_format` values, in OpenAI's order."""

SAMPLE_RATE: Final = 24000
"""Kokoro's output rate, and the rate of every cast."""

SAMPLE_RATES: Final[tuple[int, ...]] = (8000, 12000, 16000, 24000, 48000)
"""Rates every format accepts (Opus allows only these). LAYOUTS hold at SAMPLE_RATE only."""

_CONTENT_TYPES: Final[dict[str, str]] = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}

MP3_BITRATE_KBPS: Final = 64
"""mp3 is MPEG-2 Layer III at 24 kHz, constant 64 kbit/s, mono. 72 * 64000 / 24000 = 192 is a
whole number, so LAME never sets the padding bit: every frame is exactly 192 bytes."""
_MP3_FRAME_BYTES: Final = 72 * MP3_BITRATE_KBPS * 1000 // SAMPLE_RATE


@dataclass(frozen=True, slots=True)
class RecordLayout:
    """How the records of one format decode on their own, at SAMPLE_RATE.

    To decode record k alone: put `header_bytes` bytes from the start of record 0 in front (k > 0),
    then the last `preroll` frames (or Ogg pages) of the stream before record k, decode, and keep
    the decoded samples that belong to record k (the last ones). `standalone_record` does exactly
    this and is the reference for a player written in another language.
    """

    format: str
    header_bytes: int = 0
    """Length of the header that starts record 0, needed in front of a later record (0: none)."""
    preroll: int = 0
    """How many `preroll_unit`s of the earlier stream a decoder needs before record k (0: none)."""
    preroll_unit: str = ""
    """"frame" (mp3 and ADTS frames), "page" (Ogg pages) or "" (no pre-roll)."""
    frame_bytes: int = 0
    """Bytes per frame when constant (mp3: 192), else 0 (read each frame's header)."""
    frame_samples: int = 1
    """Decoded samples per frame or Ogg page at `decode_rate` (flac: all frames but the last)."""
    delay_samples: int = 0
    """Leading decoded samples (at `decode_rate`) that come before the first PCM sample."""
    decode_rate: int = SAMPLE_RATE
    """The rate decoders output: SAMPLE_RATE, except 48000 for Opus."""
    exact: bool = True
    """Whether a record decoded alone gives exactly the samples of decoding the whole file."""

    def to_json(self) -> dict[str, object]:
        """The fields as a JSON object (for a player page)."""
        return asdict(self)


LAYOUTS: Final = MappingProxyType(
    {
        # Pre-roll 4 = 2 + 1 + 1: the bit reservoir lets a frame's main data start up to 255
        # bytes back, in either of the 2 previous frames (179 bytes of main data each); then one
        # frame for the MDCT overlap and one for the synthesis filterbank's history. Delay:
        # LAME's encoder delay (576) plus the synthesis filterbank's decoder delay (529); no
        # LAME/Xing tag is written, so decoders (ffmpeg, Chromium) trim nothing.
        "mp3": RecordLayout(
            "mp3",
            preroll=4,
            preroll_unit="frame",
            frame_bytes=_MP3_FRAME_BYTES,
            frame_samples=576,
            delay_samples=576 + 529,
        ),
        # ADTS frames are self-contained; one earlier frame restores the MDCT overlap, and a
        # second keeps the blob at three frames, the least Chromium decodes mid-stream. Delay:
        # the encoder's 1024 priming samples, which ADTS cannot signal.
        "aac": RecordLayout(
            "aac", preroll=2, preroll_unit="frame", frame_samples=1024, delay_samples=1024
        ),
        # OpusHead + OpusTags pages (97 bytes); 60 ms packets, one per page, 2880 samples at
        # 48 kHz. Opus carries predictor state across packets, so no pre-roll is exact; 8 pages
        # (480 ms) bring a fresh decoder within about -50 dBFS of the whole-file decode.
        "opus": RecordLayout(
            "opus",
            header_bytes=97,
            preroll=8,
            preroll_unit="page",
            frame_samples=2880,
            decode_rate=48000,
            exact=False,
        ),
        # fLaC + STREAMINFO + VORBIS_COMMENT (vendor "ffmpeg"); FLAC frames are independent.
        "flac": RecordLayout("flac", header_bytes=60, frame_samples=2304),
        "wav": RecordLayout("wav", header_bytes=44, frame_bytes=2),
        "pcm": RecordLayout("pcm", frame_bytes=2),
    }
)
"""RecordLayout of every format, at SAMPLE_RATE."""


def check_format(fmt: str) -> str:
    """Return `fmt` if speechd can encode it, else raise InvalidRequest(param="response_format")."""
    if fmt not in _CONTENT_TYPES:
        shown = ", ".join(FORMATS)
        raise InvalidRequest(
            f"Unsupported response_format {fmt!r}; use one of: {shown}.",
            param="response_format",
        )
    return fmt


def content_type(fmt: str) -> str:
    """The HTTP media type of a cast encoded as `fmt` (InvalidRequest if unknown)."""
    return _CONTENT_TYPES[check_format(fmt)]
