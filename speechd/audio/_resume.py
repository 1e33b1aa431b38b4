"""Encoder checkpoints: continuing one cast's file in a new encoder (a new worker, a new attempt).

An encoder's `checkpoint()` describes the file so far after the bytes it has returned:

* `fed`: the input samples so far (the cast's timeline);
* `covered`: how many of them the returned bytes fully represent; the rest (`fed - covered`, up
  to about 130 ms) is held back inside the codec, the muxer or a part frame;
* `held`: the input from `covered - preroll` to `fed`, as s16: what a new codec needs;
* the container's counters: FLAC's next frame number, Ogg's next page sequence number, the last
  page's granule, the stream serial and the pre-skip.

`new_encoder(fmt, resume=checkpoint)` continues from it:

* pcm, wav: nothing is held; the new encoder writes samples (no second wav header). Exact.
* flac: FLAC frames are independent. A fresh FLAC codec is fed the held samples first, so its
  frames cut the timeline where the old ones would have; each frame's number is rewritten (and
  its CRC-8 and CRC-16 recomputed), and no second file header is written. Exact: the bytes are
  those of one uninterrupted encoder.
* mp3, aac, opus: a codec's state (LAME's bit reservoir and psychoacoustic model, the MDCT
  overlap, Opus's predictors) cannot be saved, so a fresh codec starts at the splice. It is fed
  `preroll` samples from before `covered`, chosen so its frames fall on the old frame grid; its
  first `drop` frames (warm-up, priming) are dropped, and the next one begins exactly at
  `covered`. So nothing is repeated or lost, the timeline keeps its length and every record
  still decodes on its own (the player's contract, see the package docstring). What differs
  is the codec noise around the splice: the decoder overlaps the old codec's last frame with
  the new codec's first. Measured on a speech-like signal peaking at 0.6 (full scale 1;
  tests/audio/test_resume.py keeps these true): no gap (0 samples; the decoded file has the
  uninterrupted one's length); the coding error in the 100 ms after the splice at most 1.5x
  (mp3), 2x (aac) and 3x (opus) the uninterrupted file's there; the two decoded files differ
  by at most 0.08 (mp3), 0.15 (aac) and 0.34 (opus) anywhere. For aac the error stays about
  1.5x for a second or two (a fresh encoder's rate control settling); for opus it is back to
  normal 80 ms after the splice.
  - mp3: the new codec is FFmpeg's libmp3lame with the bit reservoir off, so its first kept
    frame's main data begins in its own slot (the bytes before it were the old encoder's); it
    writes the same frame shape (MPEG-2 Layer III, 24 kHz mono, CBR 64 kbit/s, 192 bytes).
  - aac: FFmpeg's AAC encoder again, behind ADTS headers written here (ADTS has no counters).
  - opus: libopus again; its packets are put in Ogg pages written here (one packet per page,
    as the muxer does), page numbers and granules continued from the checkpoint, the last page
    flagged end-of-stream with the true end granule, so decoders trim the padding as before.
* A checkpoint taken before an encoder returned any bytes (mp3 and aac hold their first record
  back until it decodes) holds all the input so far: resuming replays it into a new encoder of
  the same kind, which makes exactly the bytes the first one would have.

A checkpoint is bytes (msgpack); `fingerprint` of an encoder names what must match for its
checkpoints to be continued (format, sample rate, codec settings and this module's version).
Library versions are not part of it: a resumed codec starts fresh anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import av
import msgspec
import numpy as np

from ._base import EncoderBase, to_s16
from ._containers import adts_header, flac_renumber, ogg_page

__all__ = [
    "SPLICE",
    "VERSION",
    "Checkpoint",
    "Splice",
    "SplicedEncoder",
    "checkpoint_of",
    "dump",
    "load",
]

VERSION: Final = 1
"""Bumped whenever checkpoints or the continued bytes change meaning."""


class Checkpoint(msgspec.Struct, frozen=True, array_like=True):
    """Where an encoder's file stands after the bytes it returned (see the module docstring)."""

    format: str
    version: int
    sample_rate: int
    fed: int
    covered: int
    held: bytes  # s16le input from `covered - preroll` (zeros before sample 0) to `fed`
    started: bool  # whether any bytes were returned (else `held` is all the input so far)
    units: int = 0  # flac: frames so far (the next frame number); opus: the next page number
    granule: int = 0  # opus: the granule of the last page returned
    serial: int = 0  # opus: the Ogg stream serial
    pre_skip: int = 0  # opus: OpusHead pre-skip (48 kHz samples)


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Checkpoint)


def dump(checkpoint: Checkpoint) -> bytes:
    return _encoder.encode(checkpoint)


def load(data: bytes) -> Checkpoint:
    """A checkpoint from its bytes (ValueError if they are not one this version reads)."""
    try:
        checkpoint = _decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise ValueError(f"not an encoder checkpoint: {exc}") from exc
    if checkpoint.version != VERSION:
        raise ValueError(f"checkpoint version {checkpoint.version}, this one reads {VERSION}")
    return checkpoint


@dataclass(frozen=True, slots=True)
class Splice:
    """How a fresh codec takes over a format at a checkpoint (at SAMPLE_RATE).

    Fed from timeline sample `s0`, the codec's frame `k` (of `frame` input samples) holds the
    input from `s0 + k * frame - delay`. So it is fed from `covered - preroll`, with `preroll =
    drop * frame - delay`, and its first `drop` frames are dropped: the next one begins at
    `covered`, on the old encoder's frame grid. `drop` is measured (tests/audio/test_resume.py):
    fewer warm-up frames leave a larger error after the splice (mp3: 2 frames, 0.2 peak; 3
    frames, 0.09), more buy nothing.
    """

    frame: int
    delay: int
    drop: int

    @property
    def preroll(self) -> int:
        return self.drop * self.frame - self.delay


SPLICE: Final[dict[str, Splice]] = {
    "mp3": Splice(frame=576, delay=576, drop=3),
    "aac": Splice(frame=1024, delay=1024, drop=3),
    "opus": Splice(frame=1440, delay=156, drop=2),
    "flac": Splice(frame=2304, delay=0, drop=0),
}
"""How each codec format continues: a fresh codec on the old frame grid (pcm and wav need none)."""


# -- the fresh codec after a splice -----------------------------------------------------------

_CODECS: Final[dict[str, tuple[str, str, int | None, dict[str, str]]]] = {
    # codec, sample format, bit rate, options (the first encoder's settings, see _av and _mp3)
    "mp3": ("libmp3lame", "s16p", 64_000, {"reservoir": "0", "compression_level": "2"}),
    "flac": ("flac", "s16", None, {"flags": "+bitexact"}),
    "aac": ("aac", "fltp", 64_000, {"aac_pns": "0", "flags": "+bitexact"}),
    "opus": (
        "libopus",
        "flt",
        32_000,
        {"application": "audio", "frame_duration": "60", "vbr": "on", "flags": "+bitexact"},
    ),
}


class SplicedEncoder(EncoderBase):
    """mp3, aac, opus or flac continued after a checkpoint by a fresh codec (see the module
    docstring); no file header, the container's counters carried on."""

    def __init__(self, checkpoint: Checkpoint, fingerprint: str) -> None:
        fmt = checkpoint.format
        super().__init__(checkpoint.sample_rate, fed=checkpoint.fed, tail=checkpoint.held)
        self.format = fmt
        self.fingerprint = fingerprint
        splice = SPLICE[fmt]
        self._splice = splice
        codec, sample_format, bit_rate, options = _CODECS[fmt]
        ctx = av.CodecContext.create(codec, "w")
        ctx.sample_rate = self.sample_rate
        ctx.layout = "mono"
        ctx.format = sample_format
        if bit_rate is not None:
            ctx.bit_rate = bit_rate
        ctx.options = dict(options)
        ctx.open()
        if ctx.frame_size != splice.frame:
            raise RuntimeError(f"{codec} frames of {ctx.frame_size} samples, not {splice.frame}")
        self._ctx = ctx
        self._sample_format = sample_format
        self._start = checkpoint.covered - splice.preroll  # timeline index of the codec's input 0
        self._pts = 0
        self._pending = np.empty(0, dtype=np.float32)
        self._made = 0  # codec frames out so far (dropped ones included)
        self._units = checkpoint.units
        self._granule = checkpoint.granule
        self._serial = checkpoint.serial
        self._pre_skip = checkpoint.pre_skip
        self._held_page: bytes | None = None  # opus: the newest packet, until the next one
        self._covered = checkpoint.covered  # never less: the file holds that much already
        self._out = bytearray()
        preroll = np.frombuffer(checkpoint.held, dtype="<i2").astype(np.float32) / 32767.0
        self._feed(preroll, final=False)

    def _encode(self, samples: np.ndarray, final: bool) -> bytes:
        self._feed(samples, final)
        out = bytes(self._out)
        self._out.clear()
        return out

    def _feed(self, samples: np.ndarray, final: bool) -> None:
        pending = np.concatenate([self._pending, samples]) if self._pending.size else samples
        size = self._splice.frame
        whole = len(pending) - len(pending) % size
        for start in range(0, whole, size):
            self._send(pending[start : start + size])
        self._pending = pending[whole:].copy()
        if final:
            if self._pending.size:
                self._send(self._pending)
                self._pending = self._pending[:0]
            for packet in self._ctx.encode(None):
                self._packet(bytes(packet))
            self._end()

    def _send(self, samples: np.ndarray) -> None:
        if self._sample_format in ("s16p", "s16"):
            data: np.ndarray = to_s16(samples)
        else:
            data = np.ascontiguousarray(samples, dtype=np.float32)
        frame = av.AudioFrame.from_ndarray(
            data.reshape(1, -1), format=self._sample_format, layout="mono"
        )
        frame.sample_rate = self.sample_rate
        frame.pts = self._pts
        self._pts += len(samples)
        for packet in self._ctx.encode(frame):
            self._packet(bytes(packet))

    def _packet(self, data: bytes) -> None:
        if not data:
            return  # FLAC's last "packet": new STREAMINFO as side data, for a muxer to seek back
        self._made += 1
        if self._made <= self._splice.drop:
            return  # warm-up: covers input before `covered`, already in the file
        if self.format == "mp3":
            self._emit(data)
        elif self.format == "flac":
            self._emit(flac_renumber(data, self._units))
            self._units += 1
        elif self.format == "aac":
            self._emit(adts_header(len(data), self.sample_rate) + data)
        else:  # opus: hold the newest page back, to flag the last one end-of-stream
            if self._held_page is not None:
                self._page(self._held_page, eos=False)
            self._held_page = data

    def _page(self, packet: bytes, *, eos: bool) -> None:
        granule = self._granule + self._splice.frame * 48000 // self.sample_rate
        if eos:  # the true end, so decoders trim the codec's padding
            granule = self._pre_skip + self.fed * 48000 // self.sample_rate
        page = ogg_page(packet, granule=granule, serial=self._serial, sequence=self._units, eos=eos)
        self._units += 1
        self._granule = granule
        self._emit(page)

    def _end(self) -> None:
        if self._held_page is not None:
            self._page(self._held_page, eos=True)
            self._held_page = None

    def _emit(self, data: bytes) -> None:
        self._out += data

    def checkpoint(self) -> bytes:
        out = self._made - (1 if self._held_page is not None else 0)  # frames in the file
        covered = self._start + out * self._splice.frame - self._splice.delay
        covered = min(max(covered, self._covered), self.fed)
        return dump(
            Checkpoint(
                format=self.format,
                version=VERSION,
                sample_rate=self.sample_rate,
                fed=self.fed,
                covered=covered,
                held=self.recent(covered - self._splice.preroll),
                started=True,
                units=self._units,
                granule=self._granule,
                serial=self._serial,
                pre_skip=self._pre_skip,
            )
        )


def checkpoint_of(
    encoder: EncoderBase,
    *,
    covered: int,
    started: bool,
    preroll: int = 0,
    units: int = 0,
    granule: int = 0,
    serial: int = 0,
    pre_skip: int = 0,
) -> bytes:
    """A first encoder's checkpoint: what it returned covers `covered` samples of its input."""
    if not started:
        covered, preroll = 0, 0  # nothing returned yet: a new encoder replays it all
    covered = min(covered, encoder.fed)
    return dump(
        Checkpoint(
            format=encoder.format,
            version=VERSION,
            sample_rate=encoder.sample_rate,
            fed=encoder.fed,
            covered=covered,
            held=encoder.recent(covered - preroll),
            started=started,
            units=units,
            granule=granule,
            serial=serial,
            pre_skip=pre_skip,
        )
    )
