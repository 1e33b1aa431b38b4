// A gapless Web Audio timeline: decoded chunks laid end to end, each scheduled on the audio
// clock at exactly the time the previous one ends.
//
// Position is cast time in seconds. While running, position = ctx.currentTime - anchor.
// When playback reaches the end of the audio received so far (the live edge) and more is
// coming, the timeline stalls: the position freezes there, and the next chunk resumes it.
//
// A start hold (`holdFor`: a cast the device cannot make in real time states how long its
// listener waits so that the rest plays through) keeps any start before it ends at its end:
// the timeline is "held", position 0, its first chunks scheduled for then, and plays on
// gaplessly from there.

const LEAD_S = 0.06; // scheduling headroom when (re)starting
const EDGE_S = 0.005;

export class Timeline {
  constructor(ctx) {
    this.ctx = ctx;
    this.output = ctx.createGain();
    this.output.connect(ctx.destination);
    this.chunks = [];
    this.sources = new Set();
    this.anchor = 0;
    this.frozen = 0;
    this.running = false; // sources are scheduled and the clock moves
    this.wanted = true; // the listener wants sound (autoplay until paused)
    this.complete = false; // no more chunks will come (eos)
    // The audio clock's time (ctx.currentTime) before which nothing starts sounding: on the
    // same clock as the position, so "held" and a position past 0 never overlap.
    this.holdEnd = 0;
  }

  // Start no sooner than `seconds` from now (the hold left).
  holdFor(seconds) {
    this.holdEnd = this.ctx.currentTime + Math.max(0, seconds);
    if (this.running) {
      const at = this.position();
      this._stop(at);
      this._startAt(at);
    }
  }

  // Seconds of the hold left (0: none).
  heldS() {
    return Math.max(0, this.holdEnd - this.ctx.currentTime);
  }

  get end() {
    const last = this.chunks[this.chunks.length - 1];
    return last ? last.start + last.duration : 0;
  }

  position() {
    if (!this.running) return this.frozen;
    // Until the first scheduled sample sounds (LEAD_S after a start), stay where we started.
    return Math.max(this.frozen, Math.min(this.ctx.currentTime - this.anchor, this.end));
  }

  get state() {
    if (this.running) return this.heldS() > 0 ? "held" : "playing";
    if (!this.wanted) return "paused";
    if (this.complete && this.frozen >= this.end - EDGE_S) return "ended";
    return "buffering";
  }

  // Lay `buffer` right after the audio so far (scheduled at once if playing).
  append(buffer) {
    const chunk = { buffer, start: this.end, duration: buffer.duration };
    this.chunks.push(chunk);
    if (this.running) {
      if (this.anchor + chunk.start < this.ctx.currentTime + EDGE_S) {
        // It came too late to follow on seamlessly: resume from the old edge instead.
        this._stop(chunk.start);
        this._startAt(chunk.start);
      } else {
        this._schedule(chunk);
      }
    } else if (this.wanted && this.frozen < this.end - EDGE_S) {
      this._startAt(this.frozen);
    }
    return chunk;
  }

  play() {
    this.wanted = true;
    if (this.running) return;
    if (this.complete && this.frozen >= this.end - EDGE_S) this.frozen = 0;
    this._startAt(this.frozen);
  }

  pause() {
    this.wanted = false;
    this._stop(this.position());
  }

  seek(pos) {
    const to = Math.max(0, Math.min(pos, this.end));
    if (this.running) {
      this._stop(to);
      this._startAt(to);
    } else {
      this.frozen = to;
      if (this.wanted) this._startAt(to);
    }
  }

  // A new attempt replaces every chunk; the listener keeps its place and resumes there once
  // the new attempt's audio reaches it.
  reset() {
    this._stop(this.position());
    this.chunks = [];
    this.complete = false;
  }

  // Call often (every ~100 ms): notices that playback ran into the live edge or the end.
  tick() {
    if (this.running && this.ctx.currentTime - this.anchor >= this.end - EDGE_S) {
      this._stop(this.end);
    }
  }

  _startAt(pos) {
    if (pos >= this.end - EDGE_S) {
      this.frozen = Math.min(pos, this.end);
      return; // nothing to play yet: stalled at the live edge (or ended)
    }
    this.anchor = this.ctx.currentTime + Math.max(LEAD_S, this.heldS()) - pos;
    this.frozen = pos;
    this.running = true;
    for (const chunk of this.chunks) {
      if (chunk.start + chunk.duration > pos) this._schedule(chunk, Math.max(chunk.start, pos));
    }
  }

  // Play `chunk` from cast time `from` (its start, or later when starting mid-chunk).
  _schedule(chunk, from = chunk.start) {
    let when = this.anchor + from;
    let offset = from - chunk.start;
    const now = this.ctx.currentTime;
    if (when < now) {
      offset += now - when;
      when = now;
    }
    if (offset >= chunk.duration) return;
    const source = this.ctx.createBufferSource();
    source.buffer = chunk.buffer;
    source.connect(this.output);
    source.start(when, offset);
    this.sources.add(source);
    source.onended = () => this.sources.delete(source);
  }

  _stop(at) {
    this.frozen = at;
    this.running = false;
    for (const source of this.sources) {
      source.onended = null;
      try {
        source.stop();
      } catch {
        // never started
      }
      source.disconnect();
    }
    this.sources.clear();
  }
}
