// The player: reads the cast's playable sequence (records endpoint, long-poll), decodes each
// audio record onto a gapless Web Audio timeline, shows captions as they play and follows the
// live edge until eos. Records with words (the `w` header: [[start_ms, end_ms, text,
// [begin, end], mark], ...] from the record's start) make the captions read along: the word
// playing is highlighted, and a click on a word seeks to it. Where this tab made the cast
// (the paste page keeps the text as sent in sessionStorage; the server never publishes it),
// the player also shows that text, and highlights in it the characters the word playing was
// read from (`[begin, end)`: "2024" for "twenty twenty-four", an SSML element's text).
//
// A cast the device cannot make in real time states on its first audio record how long its
// listeners wait before playing (`h`, ms), so that the rest plays through without a stall:
// the player asks the cast's status how much of that hold is left (`plays_in_seconds`, the
// server's clock), shows "Starts in N s" and starts then, gaplessly (play, pause and seek keep
// to it: nothing sounds before it ends). Opened after the hold, it plays at once; opened as
// /c/<id>?start=now (as `start: now` asks of the api), it plays from the first audio and
// stalls where the device falls behind.
//
// The playable sequence (the rule is speechd/casts/_playable.py; this mirrors playable_spans):
// the latest `start` lists the records it keeps from earlier attempts as [seq, index, count]
// spans (`kept`), then come its own audio records; every record's `i` is its place in the
// sequence. The player finds the latest start from the stream's last record (its `x` header
// names the start's seq), plays the kept spans, then follows from that start on. A newer
// start that keeps everything played so far is followed seamlessly; one that keeps less (the
// cast started over: another model, encoder or plan) resets the player to its kept records.
//
// Where this browser was in a cast is kept in its localStorage (the server keeps no listener's
// place), every few seconds while it plays: opened again, the player offers "Resume at m:ss"
// once the audio reaches there (a book's chapters are casts: each remembers its own place).
//
// Test hook: window.speechd.snapshot() -> {state, clock, caption, chunks, planned, duration,
// complete, attempt, restarts, error, captions, word, wordIndex, source, words, holdS};
// window.speechd.seek(chunkIndex).

import { RecordDecoder, layoutOf } from "./decode.js";
import { Timeline } from "./timeline.js";

const castId = document.body.dataset.castId;
const api = `/v1/casts/${encodeURIComponent(castId)}`;
const $ = (id) => document.getElementById(id);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const POLL_WAIT_S = 20;
const startNow = new URLSearchParams(location.search).get("start") === "now";

let ctx = null;
let timeline = null;
let decoder = null;
let meta = null;
let attempt = 0; // the attempt being played
let planned = null;
let queued = true;
let failure = null;
let restarts = 0;
let shownCaption = -1;
let captions = []; // {index, at (s), text, words}: one per audio record, placed by its `o`
let words = []; // every word so far, in order: {at, end (s), text, source, el, sourceEl}
// The text as sent, when this tab made the cast: shown with spans over the words' sources.
// Sources count code points (Python's indices), so the text is read as an array of them.
const sourceText = (() => {
  try {
    const text = sessionStorage.getItem(`speechd.source.${castId}`);
    return text === null ? null : Array.from(text);
  } catch {
    return null;
  }
})();
const sourceSlice = (a, b) => sourceText.slice(a, b).join("");
let sourceShown = 0; // characters of it already split into the panel (sources are monotone)
let sourceRest = null; // the text node holding the rest
let sourceLast = null; // the last word span, and its [begin, end)
let shownWord = -1;
// This browser's place in the cast (seconds; 0: none), kept as it plays.
const PLACE = `speechd.place.${castId}`;
const PLACE_MIN_S = 5; // nearer the start than this, starting over loses nothing
const PLACE_EVERY_MS = 2000;
const storage = {
  get: () => {
    try {
      return Number(localStorage.getItem(PLACE)) || 0;
    } catch {
      return 0;
    }
  },
  set: (seconds) => {
    try {
      if (seconds > 0) localStorage.setItem(PLACE, seconds.toFixed(1));
      else localStorage.removeItem(PLACE);
    } catch {
      // storage off (a private window): the place is not kept
    }
  },
};
const resumeAt = storage.get(); // where a past visit left off
let placeKeptAt = 0;

function fmtTime(s) {
  const t = Math.max(0, Math.floor(s));
  const h = Math.floor(t / 3600);
  const m = Math.floor((t % 3600) / 60);
  const sec = String(t % 60).padStart(2, "0");
  return h ? `${h}:${String(m).padStart(2, "0")}:${sec}` : `${m}:${sec}`;
}

function headersOf(record) {
  return Object.fromEntries(record.headers);
}

function bytesOf(b64) {
  const text = atob(b64);
  const out = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) out[i] = text.charCodeAt(i);
  return out;
}

function jsonOf(record) {
  return JSON.parse(new TextDecoder().decode(bytesOf(record.body)));
}

function showFailure(message) {
  const box = $("failure");
  box.textContent = message;
  box.hidden = false;
}

function fail(message) {
  failure = message;
  showFailure(message);
  update();
}

function state() {
  if (failure) return "failed";
  if (!timeline) return queued ? "queued" : "loading";
  if (ctx.state !== "running" && timeline.wanted) return "suspended";
  if (timeline.chunks.length === 0) return queued && !captions.length ? "queued" : "buffering";
  return timeline.state;
}

// The caption playing at cast time `pos` (-1 before any).
function captionAt(pos) {
  let found = -1;
  for (let i = 0; i < captions.length && captions[i].at <= pos + 1e-6; i++) found = i;
  return found;
}

// The word playing at cast time `pos`: the last one started (-1 before any).
function wordAt(pos) {
  let lo = 0;
  let hi = words.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (words[mid].at <= pos + 1e-6) lo = mid + 1;
    else hi = mid;
  }
  return lo - 1;
}

function snapshot() {
  const clock = timeline ? timeline.position() : 0;
  const word = timeline && timeline.chunks.length ? wordAt(clock) : -1;
  return {
    state: state(),
    clock,
    audioTime: ctx ? ctx.currentTime : 0,
    caption: timeline && timeline.chunks.length ? captionAt(clock) : -1,
    chunks: captions.length,
    planned,
    duration: timeline ? timeline.end : 0,
    complete: timeline ? timeline.complete : false,
    attempt,
    restarts,
    error: failure,
    captions: captions.map((c) => c.text),
    word: word >= 0 ? words[word].text : null,
    wordIndex: word,
    source: word >= 0 && words[word].sourceEl ? words[word].sourceEl.textContent : null,
    words: words.length,
    holdS: timeline ? timeline.heldS() : 0,
    resumeAt,
  };
}

// The timeline's samples joined (for tests that compare it with a whole-file decode).
function timelinePcm() {
  const chunks = timeline ? timeline.chunks : [];
  const out = new Float32Array(chunks.reduce((n, c) => n + c.buffer.length, 0));
  let at = 0;
  for (const chunk of chunks) {
    out.set(chunk.buffer.getChannelData(0), at);
    at += chunk.buffer.length;
  }
  return out;
}

window.speechd = { snapshot, seek: (index) => seekTo(index), timelinePcm };

// A live cast's text is still being written: how many parts it will have is not known.
const isLive = () => Boolean(meta && meta.live);

function statusLine(s) {
  if (failure) return "This cast failed.";
  const chunks = captions.length;
  const of = planned && !isLive() ? ` of ${planned}` : "";
  const generating = timeline && !timeline.complete;
  switch (s.state) {
    case "queued":
      return "Queued: waiting for the speech worker to start…";
    case "loading":
      return "Loading…";
    case "suspended":
      return "Ready: press Play to listen.";
    case "held":
      return `Starts in ${Math.ceil(s.holdS)} s, so that it plays through without a pause`;
    case "buffering":
      if (generating && isLive()) return `Live · ${chunks} parts so far, waiting for more text…`;
      return generating ? `Generating… ${chunks}${of} parts ready` : "Buffering…";
    case "ended":
      return `Finished · ${chunks} parts`;
    default: {
      if (!generating) return `${s.state === "paused" ? "Paused" : "Playing"} · complete`;
      const ahead = Math.max(0, s.duration - s.clock);
      return `${s.state === "paused" ? "Paused" : "Playing"} · generating ${chunks}${of} parts, ${Math.round(ahead)} s ahead`;
    }
  }
}

function update() {
  const s = snapshot();
  $("clock").textContent = fmtTime(s.clock);
  $("duration").textContent = fmtTime(s.duration) + (s.complete || failure ? "" : "+");
  const estimate = s.complete || isLive()
    ? s.duration
    : planned && s.chunks
      ? (s.duration * planned) / s.chunks
      : s.duration;
  $("bar-ready").style.width = `${estimate ? (100 * s.duration) / estimate : 0}%`;
  $("bar-played").style.width = `${estimate ? (100 * s.clock) / estimate : 0}%`;
  $("status").textContent = statusLine(s);
  $("play").disabled = !timeline || s.chunks === 0;
  $("play").textContent = sounding(s.state) ? "Pause" : "Play";
  document.body.dataset.state = s.state;
  if (s.caption !== shownCaption) {
    const items = $("captions").children;
    if (shownCaption >= 0 && items[shownCaption]) items[shownCaption].classList.remove("current");
    if (s.caption >= 0 && items[s.caption]) {
      items[s.caption].classList.add("current");
      items[s.caption].scrollIntoView({ block: "nearest" });
      $("now").textContent = captions[s.caption].text;
    }
    shownCaption = s.caption;
  }
  if (s.wordIndex !== shownWord) {
    const old = words[shownWord];
    if (old && old.el) old.el.classList.remove("current");
    if (old && old.sourceEl) old.sourceEl.classList.remove("current");
    const now = words[s.wordIndex];
    if (now && now.el) now.el.classList.add("current");
    if (now && now.sourceEl) {
      now.sourceEl.classList.add("current");
      now.sourceEl.scrollIntoView({ block: "nearest" });
    }
    shownWord = s.wordIndex;
  }
  keepPlace(s);
}

// Keeps this browser's place while the cast sounds (past its first seconds); at its end,
// forgets it (a next visit starts over). Offers the place a past visit left while this one is
// still near the start and the audio reaches that far.
function keepPlace(s) {
  if (s.state === "ended") {
    if (placeKeptAt >= 0) storage.set(0);
    placeKeptAt = -1;
  } else if (sounding(s.state) && s.clock >= PLACE_MIN_S) {
    if (Date.now() - placeKeptAt >= PLACE_EVERY_MS) {
      storage.set(s.clock);
      placeKeptAt = Date.now();
    }
  }
  const button = $("resume");
  const offer = resumeAt >= PLACE_MIN_S && s.duration >= resumeAt && s.clock < PLACE_MIN_S
    && s.state !== "ended";
  if (offer && button.hidden) button.textContent = `Resume at ${fmtTime(resumeAt)}`;
  button.hidden = !offer;
}

function seekTo(index) {
  if (!timeline || !captions[index]) return;
  ctx.resume();
  timeline.wanted = true;
  timeline.seek(captions[index].at);
  update();
}

function seekToWord(word) {
  if (!timeline) return;
  ctx.resume();
  timeline.wanted = true;
  timeline.seek(word.at);
  update();
}

// The caption's text with each of its words (found in order) in a span of its own.
function renderWords(caption) {
  const button = caption.button;
  button.replaceChildren();
  let cursor = 0;
  for (const word of caption.words) {
    const found = caption.text.indexOf(word.text, cursor);
    if (found < 0) continue; // not in the text as written: timed, but not shown
    if (found > cursor) button.append(caption.text.slice(cursor, found));
    const span = document.createElement("span");
    span.className = words[shownWord] === word ? "word current" : "word";
    span.textContent = word.text;
    span.addEventListener("click", (event) => {
      event.stopPropagation();
      seekToWord(word);
    });
    word.el = span;
    button.append(span);
    cursor = found + word.text.length;
  }
  if (cursor < caption.text.length) button.append(caption.text.slice(cursor));
}

// The text as sent, split so that each word's source is a span of its own (a word whose
// source is the one before's, like the three words of a date, shares its span).
function showSources(timed) {
  if (sourceText === null) return;
  const panel = $("source");
  if (panel.hidden) {
    panel.hidden = false;
    sourceRest = document.createTextNode(sourceSlice(0, sourceText.length));
    panel.replaceChildren(sourceRest);
  }
  for (const word of timed) {
    if (!word.source) continue;
    const [begin, end] = word.source;
    if (sourceLast && begin === sourceLast.begin && end === sourceLast.end) {
      word.sourceEl = sourceLast.el;
      continue;
    }
    if (begin < sourceShown || end > sourceText.length || end <= begin) continue;
    const before = document.createTextNode(sourceSlice(sourceShown, begin));
    const span = document.createElement("span");
    span.className = "word";
    span.textContent = sourceSlice(begin, end);
    span.addEventListener("click", () => seekToWord(word));
    sourceRest.textContent = sourceSlice(end, sourceText.length);
    panel.insertBefore(before, sourceRest);
    panel.insertBefore(span, sourceRest);
    sourceShown = end;
    sourceLast = { begin, end, el: span };
    word.sourceEl = span;
  }
}

function addCaption(chunk, index) {
  captions.push(chunk);
  const item = document.createElement("li");
  const button = document.createElement("button");
  button.type = "button";
  button.className = "caption";
  button.textContent = chunk.text;
  button.title = `Play from ${fmtTime(chunk.at)}`;
  button.addEventListener("click", () => seekTo(index));
  item.append(button);
  $("captions").append(item);
  chunk.button = button;
  if (!chunk.words.length) return;
  words.push(...chunk.words);
  showSources(chunk.words);
  // A long chunk's later records have no text of their own: their words are in the text of
  // the chunk's first record.
  let owner = index;
  while (owner > 0 && !captions[owner].text) owner--;
  if (owner !== index) captions[owner].words.push(...chunk.words);
  renderWords(captions[owner]);
}

function clearCaptions() {
  $("captions").replaceChildren();
  $("now").textContent = "";
  captions = [];
  shownCaption = -1;
  words = [];
  shownWord = -1;
  sourceShown = 0;
  sourceLast = null;
  if (sourceText !== null) {
    $("source").hidden = true;
  }
}

// The record's words (the `w` header) in cast time; [] when it has none or they do not parse.
function wordsOf(h, at) {
  if (!h.w) return [];
  try {
    // Marks (SSML's named points: no text) are not words to show.
    return JSON.parse(h.w)
      .filter((w) => !w[4])
      .map(([start, end, text, source]) => ({
        at: at + start / 1000,
        end: at + end / 1000,
        text: String(text),
        source: Array.isArray(source) && source.length === 2 ? source.map(Number) : null,
        el: null,
        sourceEl: null,
      }));
  } catch {
    return [];
  }
}

function openAudio(m) {
  meta = m;
  const layout = layoutOf(m.format);
  if (!layout) throw new Error(`this player cannot decode ${m.format}`);
  // Run at the decode rate: decodeAudioData resamples each file on its own, which would put
  // errors at every record's edges.
  ctx = new AudioContext({ sampleRate: layout.decode_rate, latencyHint: "playback" });
  timeline = new Timeline(ctx);
  decoder = new RecordDecoder(ctx, m.format, layout);
  ctx.resume();
  const details = [m.voice, `${m.speed}×`, m.format].join(" · ");
  $("meta").textContent = details;
}

// The listener wants sound in these states (Play pauses them).
const sounding = (s) => s === "playing" || s === "buffering" || s === "held";

// How much of a stated start hold is left (0: none, or it has passed): the cast's status
// says, on the server's clock.
async function holdLeft() {
  if (startNow) return 0;
  try {
    const status = await fetchJson(api);
    return Number((status.progress || {}).plays_in_seconds) || 0;
  } catch {
    return 0; // no status: play at once rather than not at all
  }
}

async function playAudio(record) {
  const h = headersOf(record);
  queued = false;
  const index = Number(h.i);
  if (index !== captions.length) return; // not the next record of the sequence: keep ours
  if (index === 0 && Number(h.h) > 0) timeline.holdFor(await holdLeft());
  planned = Number(h.n) || planned;
  const at = Number(h.o) / 1000;
  const last = index === planned - 1;
  const end = last ? Math.round(((Number(h.o) + Number(h.d)) * decoder.rate) / 1000) : null;
  const buffer = await decoder.decode(bytesOf(record.body), end);
  if (buffer) timeline.append(buffer);
  addCaption({ index, at, text: h.t || "", words: wordsOf(h, at) }, index);
}

// Handles one record met while following; returns "restart" when a newer attempt keeps
// fewer records than are playing (then the player starts over from the cast's head).
async function handle(record, superseded) {
  const h = headersOf(record);
  const event = h.e;
  if (event === "meta") {
    if (!meta) openAudio(jsonOf(record));
    return null;
  }
  if (event === "start") {
    const start = jsonOf(record);
    if ((start.keep || 0) !== captions.length) return "restart";
    queued = false;
    attempt = Number(h.a || 0);
    planned = start.chunks || null;
  } else if (event === "audio") {
    if (Number(h.a || 0) !== attempt) return null; // not the attempt being followed
    await playAudio(record);
  } else if (event === "eos") {
    timeline.complete = true;
  } else if (event === "error" && !superseded) {
    const why = jsonOf(record);
    timeline.complete = true;
    fail(`This cast could not be finished: ${why.message}`);
  } else if (event === "retry") {
    queued = true; // asked for again after it failed: a new attempt follows
  }
  update();
  return null;
}
async function fetchJson(url) {
  for (let backoff = 500; ; backoff = Math.min(backoff * 2, 10000)) {
    let response;
    try {
      response = await fetch(url, { cache: "no-store" });
    } catch {
      $("status").textContent = "Connection lost; retrying…";
      await sleep(backoff);
      continue;
    }
    if (response.ok) return await response.json();
    if (response.status === 429) {
      await sleep(1000 * Number(response.headers.get("retry-after") || 1));
      continue;
    }
    if (response.status >= 500 && response.status !== 501) {
      await sleep(backoff);
      continue;
    }
    let message = `HTTP ${response.status}`;
    try {
      message = (await response.json()).error.message || message;
    } catch {
      // not our JSON
    }
    throw new Error(message);
  }
}

async function recordAt(seq) {
  const page = await fetchJson(`${api}/records?seq_num=${seq}&max_records=1`);
  return { record: page.records[0] || null, tail: page.tail };
}

// The seq of the `start` of `record`'s attempt (null: none): its `x`, or (streams written
// before `x`) an audio record's `i` counted from its start.
function startSeqOf(record) {
  const h = headersOf(record);
  if (h.e === "start") return record.seq_num;
  if (h.x !== undefined) return Number(h.x);
  if (h.e === "audio") return record.seq_num - Number(h.i) - 1;
  return null;
}

// Opens the cast at its head: meta, the latest start, its kept spans played. Returns the seq
// to follow from (after the latest start).
async function openHead() {
  const head = await recordAt(0);
  await handle(head.record, false);
  if (head.tail <= 1) return 1;
  const { record: last } = await recordAt(head.tail - 1);
  let startSeq = startSeqOf(last);
  if (startSeq === null && last.seq_num > 1) {
    startSeq = startSeqOf((await recordAt(last.seq_num - 1)).record);
  }
  if (startSeq === null) return 1; // nothing started yet
  const { record: startRecord } = await recordAt(startSeq);
  const start = jsonOf(startRecord);
  attempt = Number(headersOf(startRecord).a || 0);
  planned = start.chunks || null;
  queued = false;
  for (const [seq, , count] of start.kept || []) {
    let at = seq;
    while (at < seq + count) {
      const page = await fetchJson(`${api}/records?seq_num=${at}&max_records=${seq + count - at}`);
      if (!page.records.length) break;
      for (const record of page.records) {
        if (record.seq_num >= seq + count) break;
        await playAudio(record);
        at = record.seq_num + 1;
      }
    }
  }
  update();
  return startSeq + 1;
}

function startOver() {
  timeline.reset();
  decoder.reset();
  clearCaptions();
  restarts++;
}

async function follow() {
  const status = await fetchJson(api);
  queued = status.status === "queued";
  let seq = await openHead();
  while (!failure && !(timeline && timeline.complete)) {
    const page = await fetchJson(`${api}/records?seq_num=${seq}&wait=${POLL_WAIT_S}`);
    for (const record of page.records) {
      // An error that records follow (a retry, a new attempt) no longer ends the cast.
      const superseded = page.tail > record.seq_num + 1;
      if ((await handle(record, superseded)) === "restart") {
        startOver();
        seq = await openHead();
        break;
      }
      seq = record.seq_num + 1;
      if (failure || (timeline && timeline.complete)) break;
    }
  }
}

$("play").addEventListener("click", () => {
  if (!timeline) return;
  ctx.resume();
  const s = state();
  if (sounding(s)) timeline.pause();
  else timeline.play();
  update();
});

$("resume").addEventListener("click", () => {
  if (!timeline) return;
  ctx.resume();
  timeline.wanted = true;
  timeline.seek(resumeAt);
  update();
});

$("bar").addEventListener("click", (event) => {
  if (!timeline || !timeline.chunks.length) return;
  const rect = event.currentTarget.getBoundingClientRect();
  const s = snapshot();
  const estimate = s.complete ? s.duration : planned ? (s.duration * planned) / s.chunks : s.duration;
  ctx.resume();
  timeline.wanted = true;
  timeline.seek(((event.clientX - rect.left) / rect.width) * estimate);
  update();
});

setInterval(() => {
  if (timeline) timeline.tick();
  update();
}, 100);

follow().catch((error) => fail(`This cast cannot be played: ${error.message}`));
