"""pcm (headerless s16le) and wav (the same samples behind a streaming RIFF header)."""

from __future__ import annotations

import struct

import numpy as np

from ._base import EncoderBase, to_s16
from ._formats import LAYOUTS, SAMPLE_RATE
from ._resume import VERSION, Checkpoint, checkpoint_of

__all__ = ["UNKNOWN_LENGTH", "PcmEncoder", "WavEncoder", "finished_bytes", "wav_header"]

UNKNOWN_LENGTH = 0xFFFFFFFF
"""What a streaming wav header says for the RIFF and data chunk sizes: the length is not known
when the header is sent. ffmpeg writes the same value to unseekable outputs and reads such a
file to its end; Chromium's decodeAudioData, libsndfile and Python's `wave` accept it too."""


def wav_header(
    sample_rate: int, *, channels: int = 1, bits: int = 16, data_bytes: int | None = None
) -> bytes:
    """The 44-byte canonical PCM WAVE header: of a stream of unknown length, or, given
    `data_bytes`, of a finished file whose samples take that many bytes (past 4 GiB, a WAVE
    header cannot say, and says unknown)."""
    block_align = channels * bits // 8
    data_size = UNKNOWN_LENGTH
    riff_size = UNKNOWN_LENGTH
    if data_bytes is not None and 36 + data_bytes < UNKNOWN_LENGTH:
        data_size, riff_size = data_bytes, 36 + data_bytes
    header = b"".join(
        [
            struct.pack("<4sI4s", b"RIFF", riff_size, b"WAVE"),
            struct.pack(
                "<4sIHHIIHH",
                b"fmt ",
                16,
                1,  # WAVE_FORMAT_PCM
                channels,
                sample_rate,
                sample_rate * block_align,
                block_align,
                bits,
            ),
            struct.pack("<4sI", b"data", data_size),
        ]
    )
    assert len(header) == LAYOUTS["wav"].header_bytes
    return header


def finished_bytes(fmt: str, piece: bytes, *, offset: int, size: int) -> bytes:
    """`piece`, the bytes at `offset` of a cast's finished file of `size` bytes in `fmt`, as a
    whole file must read.

    The records hold the file as it streamed, and a streamed wav header cannot know its sizes
    (`UNKNOWN_LENGTH`); a finished file can, and `wave`, `ffmpeg -xerror` and players that
    trust the header need it to. So for wav the first 44 bytes become `wav_header(...,
    data_bytes=size - 44)`; every other format's streamed bytes already make a whole file
    (mp3, aac: headerless frames; opus: the last page ends the stream; flac: STREAMINFO's
    "total samples unknown" is valid), and `piece` comes back as it is. Serve whole files,
    byte ranges included, through this; never a live-growing one.
    """
    header_bytes = LAYOUTS["wav"].header_bytes
    if fmt != "wav" or offset >= header_bytes or size < header_bytes:
        return piece
    true = wav_header(SAMPLE_RATE, data_bytes=size - header_bytes)
    head = true[offset : offset + len(piece)]
    return head + piece[len(head) :]


class PcmEncoder(EncoderBase):
    """16-bit little-endian mono samples, no header: every record is plain samples."""

    format = "pcm"

    def __init__(self, sample_rate: int, *, resume: Checkpoint | None = None) -> None:
        super().__init__(sample_rate, fed=resume.fed if resume else 0)
        self.fingerprint = f"{self.format}/{self.sample_rate}/s16le/r{VERSION}"

    def _encode(self, samples: np.ndarray, final: bool) -> bytes:
        return to_s16(samples).tobytes()

    def checkpoint(self) -> bytes:
        return checkpoint_of(self, covered=self.fed, started=self._started)

    @property
    def _started(self) -> bool:
        return True


class WavEncoder(PcmEncoder):
    """The pcm samples, with a streaming RIFF header in front of the first record (not after
    a checkpoint: the file has its header already)."""

    format = "wav"

    def __init__(self, sample_rate: int, *, resume: Checkpoint | None = None) -> None:
        super().__init__(sample_rate, resume=resume)
        self._header: bytes | None = None if resume else wav_header(self.sample_rate)

    def _encode(self, samples: np.ndarray, final: bool) -> bytes:
        header, self._header = self._header or b"", None
        return header + super()._encode(samples, final)

    @property
    def _started(self) -> bool:
        return self._header is None
