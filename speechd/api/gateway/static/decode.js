// Decoding one audio record on its own, so each can be placed on the timeline as it arrives.
//
// This follows the per-record contract of speechd/audio (its package docstring, "Decoding one
// record on its own"; `standalone_record` is the reference). Per attempt, P is the earlier
// records concatenated; only its header and its last few frames or Ogg pages are kept here:
//
//   mp3   file = last 4 frames of P + record; keep the last 576 * frames(record) samples
//   aac   file = last 2 ADTS frames of P + record; keep the last 1024 * frames(record)
//   flac  file = first 60 bytes of P + record (record 0 as is); keep everything
//   opus  file = first 97 bytes of P + last 8 pages of P + record; keep
//         granule(last page of record) - granule(last page of P) (or - pre-skip); approximate
//   wav   s16le after the 44-byte header of record 0, read directly
//   pcm   s16le, read directly
//
// The files are decoded by the browser (decodeAudioData) in a context that runs at the decode
// rate (48 kHz for opus, else 24 kHz), so nothing is resampled per record. The first
// `delay_samples` of an attempt (the codec's priming: mp3 1105, aac 1024) are dropped, and the
// last chunk is cut at the cast's true length, so the timeline is exactly the PCM.

// The layouts are speechd.audio.LAYOUTS (RecordLayout.to_json()), which the player page
// carries in <script type="application/json" id="layouts">: one source of truth.
export function layoutOf(format) {
  const block = document.getElementById("layouts");
  const layouts = block ? JSON.parse(block.textContent) : {};
  return layouts[format] || null;
}

function concat(...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

function ascii(bytes, at, n) {
  return String.fromCharCode(...bytes.subarray(at, at + n));
}

// Where the samples of a RIFF/WAVE file start, and its layout.
export function parseWavHeader(bytes) {
  if (bytes.length < 12 || ascii(bytes, 0, 4) !== "RIFF" || ascii(bytes, 8, 4) !== "WAVE") {
    throw new Error("the first wav record does not start with a RIFF/WAVE header");
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let at = 12;
  let format = {};
  while (at + 8 <= bytes.length) {
    const id = ascii(bytes, at, 4);
    const size = view.getUint32(at + 4, true);
    if (id === "fmt ") {
      format = {
        channels: view.getUint16(at + 10, true),
        sampleRate: view.getUint32(at + 12, true),
        bits: view.getUint16(at + 22, true),
      };
    } else if (id === "data") {
      return { ...format, offset: at + 8 };
    }
    at += 8 + size + (size % 2); // a streaming header's huge size is only ever on "data"
  }
  throw new Error("the wav header has no data chunk");
}

// Whole ADTS frames of `bytes`, as subarrays.
function adtsFrames(bytes) {
  const frames = [];
  let at = 0;
  while (at + 7 <= bytes.length) {
    if (bytes[at] !== 0xff || (bytes[at + 1] & 0xf6) !== 0xf0) throw new Error("bad ADTS frame");
    const length = ((bytes[at + 3] & 3) << 11) | (bytes[at + 4] << 3) | (bytes[at + 5] >> 5);
    if (length < 7 || at + length > bytes.length) break;
    frames.push(bytes.subarray(at, at + length));
    at += length;
  }
  return frames;
}

// Whole Ogg pages of `bytes`: [{page, granule}].
function oggPages(bytes) {
  const pages = [];
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let at = 0;
  while (at + 27 <= bytes.length) {
    if (ascii(bytes, at, 4) !== "OggS") throw new Error("bad Ogg page");
    const segments = bytes[at + 26];
    if (at + 27 + segments > bytes.length) break;
    let length = 27 + segments;
    for (let i = 0; i < segments; i++) length += bytes[at + 27 + i];
    if (at + length > bytes.length) break;
    const granule = Number(view.getBigInt64(at + 6, true));
    pages.push({ page: bytes.subarray(at, at + length), granule });
    at += length;
  }
  return pages;
}

function s16(bytes, channels) {
  const frames = Math.floor(bytes.length / (2 * channels));
  const view = new DataView(bytes.buffer, bytes.byteOffset, frames * 2 * channels);
  const out = new Float32Array(frames);
  for (let i = 0; i < frames; i++) out[i] = view.getInt16(i * 2 * channels, true) / 32768;
  return out; // channel 0: casts are mono
}

export class RecordDecoder {
  constructor(ctx, format, layout) {
    this.ctx = ctx;
    this.format = format;
    this.layout = layout;
    this.rate = layout.decode_rate;
    this.reset();
  }

  // A new attempt: a new encoder made its records.
  reset() {
    this.started = false; // whether P holds anything yet
    this.header = new Uint8Array(0);
    this.tail = []; // the last `preroll` frames or pages of P
    this.granule = null; // opus: granule of P's last page
    this.preSkip = 0;
    this.carry = new Uint8Array(0); // pcm/wav: an odd trailing byte
    this.channels = 1;
    this.toDrop = this.layout.delay_samples;
    this.emitted = 0;
  }

  // The record's samples as an AudioBuffer (null if it holds none). `endSample`, for the
  // attempt's last chunk, is the cast's length in samples at the decode rate.
  async decode(bytes, endSample = null) {
    const first = !this.started;
    let samples =
      this.format === "pcm" || this.format === "wav"
        ? this._direct(bytes, first)
        : await this._decodeFile(bytes, first);
    this._remember(bytes, first);
    if (!samples) return null;
    if (this.toDrop > 0) {
      const n = Math.min(this.toDrop, samples.length);
      samples = samples.subarray(n);
      this.toDrop -= n;
    }
    if (endSample !== null) {
      const room = endSample - this.emitted;
      if (room >= 0 && room < samples.length) samples = samples.subarray(0, room);
    }
    if (!samples.length) return null;
    this.emitted += samples.length;
    const buffer = this.ctx.createBuffer(1, samples.length, this.rate);
    buffer.copyToChannel(samples, 0);
    return buffer;
  }

  _direct(bytes, first) {
    let data = bytes;
    if (this.format === "wav" && first) {
      const header = parseWavHeader(bytes);
      if (header.bits && header.bits !== 16) throw new Error(`${header.bits}-bit wav`);
      this.channels = header.channels || 1;
      data = bytes.subarray(header.offset);
    }
    data = concat(this.carry, data);
    const frameBytes = 2 * this.channels;
    const used = data.length - (data.length % frameBytes);
    this.carry = data.slice(used);
    return used ? s16(data.subarray(0, used), this.channels) : null;
  }

  async _decodeFile(bytes, first) {
    const { format, layout } = this;
    if (bytes.length <= (first ? layout.header_bytes : 0)) return null; // no audio in it
    let file;
    let keep = null;
    if (format === "mp3") {
      file = concat(...this.tail, bytes);
      keep = Math.floor(bytes.length / layout.frame_bytes) * layout.frame_samples;
    } else if (format === "aac") {
      file = concat(...this.tail, bytes);
      keep = adtsFrames(bytes).length * layout.frame_samples;
    } else if (format === "opus") {
      if (first) {
        file = bytes;
      } else {
        file = concat(this.header, ...this.tail, bytes);
        const pages = oggPages(bytes);
        const end = pages.length ? pages[pages.length - 1].granule : null;
        const start = this.granule !== null ? this.granule : this.preSkip;
        keep = end !== null ? Math.max(0, end - start) : 0;
      }
    } else {
      file = first ? bytes : concat(this.header, bytes); // flac and anything self-contained
    }
    const decoded = await this.ctx.decodeAudioData(file.slice().buffer);
    const data = decoded.getChannelData(0);
    return keep === null ? data : data.subarray(Math.max(0, data.length - keep));
  }

  _remember(bytes, first) {
    const { layout } = this;
    let audio = bytes;
    if (first) {
      this.started = bytes.length > 0;
      this.header = bytes.slice(0, layout.header_bytes);
      audio = bytes.subarray(layout.header_bytes);
      if (this.format === "opus" && this.header.length >= 40) {
        this.preSkip = this.header[38] | (this.header[39] << 8); // OpusHead pre-skip
      }
    }
    if (!layout.preroll || !audio.length) return;
    let units;
    if (this.format === "mp3") {
      units = [];
      for (let at = 0; at + layout.frame_bytes <= audio.length; at += layout.frame_bytes) {
        units.push(audio.slice(at, at + layout.frame_bytes));
      }
    } else if (this.format === "aac") {
      units = adtsFrames(audio).map((f) => f.slice());
    } else {
      const pages = oggPages(audio);
      if (pages.length) this.granule = pages[pages.length - 1].granule;
      units = pages.map((p) => p.page.slice());
    }
    this.tail = this.tail.concat(units).slice(-layout.preroll);
  }
}
