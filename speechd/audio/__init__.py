"""Audio encoders: one file per cast, fed chunk by chunk, one record per chunk.

    enc = new_encoder("mp3")                 # SAMPLE_RATE (24 kHz) mono
    body = enc.encode(pcm)                   # float32 in [-1, 1] -> this record's bytes
    body = enc.encode(pcm_last, final=True)  # flushes and ends the file (pcm may be empty)

**The stream.** One continuous encoder (and muxer) runs across a whole file, so the
concatenation of its records is one valid file that plays gaplessly: no chunk boundary restarts
a codec frame, inserts priming silence or repeats audio. The first record starts with the file
header. A record may be b"" (its chunk did not complete a codec frame); it adds no audio. A lossy
format keeps the part of a chunk that does not yet fill a frame, plus the codec's look-ahead,
for the next record (the final record carries the rest): at most about 130 ms for mp3, aac and
opus, 96 ms for flac, nothing for wav and pcm (`python -m loadtest.bench_encoders` measures it).
Output is deterministic (bit-exact muxing, Ogg serial 0, no dates or version strings): the same
chunks give the same bytes with the same libraries on the same CPU. `encode` after `final=True`
raises EncoderFinished (`_base`).

**Continuing a file.** `enc.checkpoint()` (bytes, a few kB: the samples the encoder still holds
back, plus a short pre-roll and the container's counters) says how to go on after the records
returned so far; `new_encoder(fmt, resume=checkpoint)` builds an encoder whose records, after
those, still make ONE valid file of the same timeline, each record still decodable on its own
(below). pcm, wav and flac continue byte for byte; mp3, aac and opus continue with a fresh codec
on the old frame grid: nothing repeated or lost, a little extra coding noise right after the
splice (figures in `_resume`). An encoder's `fingerprint` (`_factory.encoder_fingerprint`)
names what a checkpoint needs to match. A new attempt of a cast continues its file this way
(speechd.worker).

**Formats** (`LAYOUTS[fmt]` holds the numbers below; all are at SAMPLE_RATE):

- mp3 (audio/mpeg): LAME through lameenc, CBR 64 kbit/s MPEG-2 Layer III, frames of 576 samples
  and exactly 192 bytes (no padding bit at 24 kHz). Records hold whole frames (LAME returns
  frames in pieces; the rest waits), the first at least two. No ID3 or Xing/LAME tag.
- opus (audio/ogg): libopus 32 kbit/s VBR, 60 ms packets, one packet per Ogg page. Record 0
  starts with the OpusHead and OpusTags pages (97 bytes). Records hold whole pages; FFmpeg's
  muxer keeps its newest page until the next packet comes (it flags the last page EOS). The last
  page's granule marks the true end, so decoders trim the encoder's padding.
- aac (audio/aac): FFmpeg's AAC-LC, 64 kbit/s, in ADTS (no file header), whole 1024-sample
  frames, at least three in record 0. Noise substitution is off so records decode exactly.
- flac (audio/flac): FFmpeg's FLAC in its native container, 2304-sample frames. Record 0 starts
  with a 60-byte header (fLaC, STREAMINFO with total samples and MD5 zero = unknown, a
  VORBIS_COMMENT with vendor "ffmpeg", no padding block); the header is never rewritten.
- wav (audio/wav): a 44-byte PCM WAVE header whose RIFF and data sizes are 0xFFFFFFFF (unknown),
  as FFmpeg writes to a pipe, then s16le samples. ffmpeg, Chromium's decodeAudioData and
  libsndfile read such a stream to its end; Python's `wave` reads every sample but reports
  nframes = 2**31 - 1, and `ffmpeg -xerror` rejects it. So a *finished* file (served whole or
  by byte ranges) goes through `finished_bytes`, which puts the true sizes in its header.
- pcm (audio/pcm): s16le, 24 kHz, mono, no header.

**The decoded timeline.** Decoding the whole file gives `delay_samples` leading samples that
come before the first PCM sample (mp3: 1105 = LAME's 576 + the decoder's 529; aac: 1024 priming
samples; neither mp3 without a LAME tag nor ADTS can tell a decoder to trim them), then the PCM,
then the encoder's padding to a whole frame. Timeline sample t is PCM sample t - delay_samples:
a player starts playback at delay_samples and may stop at delay_samples + the cast's length.

**Decoding one record on its own** (the web player's contract; `standalone_record(fmt, prior,
record)` is the reference implementation, tested against ffmpeg and Chromium 156). Let P be the
earlier records of the same file (a continued one's too), concatenated. Skip a record that holds
no audio (b"", or a record 0 holding only the header). Otherwise build a small file, decode it,
keep its LAST `keep` samples, and place them right after the previous record's. Back to back,
these give exactly the samples of decoding the whole file (every format but opus), in ffmpeg
and in decodeAudioData:

- mp3: file = the last 4 frames of P (its last 4 * 192 = 768 bytes; fewer if P is shorter)
  + record; keep = len(record) / 192 * 576. Why 4 = 2 + 1 + 1: a frame's main data may begin
  up to 255 bytes back (the bit reservoir), inside either of the 2 frames before it (179 bytes
  of main data each), so pre-roll frames 1 and 2 may decode wrongly; frame 3 has its data but
  its MDCT overlaps frame 2's wrong output; frame 4 comes out right, and its subband samples are
  the history (512 samples) the synthesis filterbank needs for the record's first frame. With 3
  frames samples differ by up to 0.2; with 4, by 0 (ffmpeg and Chromium 156, bit for bit;
  Debian's Chromium 150 by at most one 16-bit step). Chromium rejects a 1-frame mp3 file; the
  pre-roll and the 2-frame first record prevent that.
- aac: file = the last 2 ADTS frames of P + record (an ADTS frame is
  ((b[3] & 3) << 11) | (b[4] << 3) | (b[5] >> 5) bytes long); keep = 1024 * frames in record.
  One frame restores the MDCT overlap; the second is there because Chromium rejects ADTS files
  of fewer than three frames that do not start the stream.
- flac: file = the first 60 bytes of P + record (record 0: as is); keep everything.
- wav: file = the first 44 bytes of P + record; or read the s16le samples directly (after the
  44 header bytes of record 0) as Int16 / 32768.
- pcm: Int16 / 32768; `standalone_record` puts a wav header in front instead.
- opus, approximate only: Opus carries predictor state across packets, so no pre-roll makes it
  exact. File = the first 97 bytes of P + the last 8 pages (480 ms) of P after them + record;
  keep = granule(record's last page) - granule(P's last page), or - the OpusHead pre-skip (312)
  if P has no audio page (granules: bytes 6-13 of a page, little-endian, 48 kHz). Decoders
  output 48 kHz. Measured: within 0.001 of the whole-file decode. Exact alternative: decode all
  of P + record again and keep the same tail.

Run the Web Audio context at the decode rate: `new AudioContext({sampleRate: 24000})`, 48000 for
opus. decodeAudioData resamples every file on its own to the context rate, and resampling 24 kHz
records to 48 kHz one by one puts errors of up to 0.1 at their edges.

**Audiobooks.** `plan_audiobook("m4b" | "mp3", chapters, title=..., author=..., cover=...)`
plans one file of chapters made as casts (aac for m4b, mp3 for mp3) from their frames' sizes
(`frame_table`), with chapter marks, tags and cover; its `size` is known before any audio is
read, and `plan.stream(files)` yields the bytes chapter by chapter, nothing transcoded
(`_audiobook`).
"""

from ._audiobook import AudiobookChapter, AudiobookPlan, frame_table, plan_audiobook
from ._factory import new_encoder
from ._formats import FORMATS, LAYOUTS, SAMPLE_RATE, check_format, content_type
from ._raw import finished_bytes
from ._standalone import standalone_record

__all__ = [
    "FORMATS",
    "LAYOUTS",
    "SAMPLE_RATE",
    "AudiobookChapter",
    "AudiobookPlan",
    "check_format",
    "content_type",
    "finished_bytes",
    "frame_table",
    "new_encoder",
    "plan_audiobook",
    "standalone_record",
]

for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type):
        _obj.__module__ = __name__
del _name, _obj
