// A book's page (/b/<id>): its chapters, each a link that opens the chapter's player (the
// server makes that chapter at a listener's priority from then on), the chapter this browser
// opened last (kept in localStorage: the server keeps no listener's place), and the whole
// audiobook's link once it is done. Reads /v1/books/<id> every few seconds until then.
const $ = (id) => document.getElementById(id);
const bookId = document.body.dataset.bookId;
const LAST = `speechd.book.${bookId}.last`;
const POLL_MS = 5000;

function clock(ms) {
  const s = Math.round(ms / 1000);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const r = String(s % 60).padStart(2, "0");
  return h ? `${h}:${String(m).padStart(2, "0")}:${r}` : `${m}:${r}`;
}

function chapterUrl(n) {
  return `/v1/books/${bookId}/chapters/${n}?to=player`;
}

function render(book) {
  $("title").textContent = book.title || "A book";
  $("meta").textContent = [book.author, `${book.chapters.length} chapters`, book.voice]
    .filter(Boolean).join(" · ");
  const pct = Math.round(book.progress * 100);
  const eta = book.eta_s != null ? `, about ${clock(book.eta_s * 1000)} left` : "";
  $("status").textContent = book.state === "done" ? "Done." : `${book.state} · ${pct}%${eta}`;
  const list = $("chapters");
  list.replaceChildren();
  const last = Number(localStorage.getItem(LAST) || 0);
  for (const chapter of book.chapters) {
    const item = document.createElement("li");
    const link = document.createElement("a");
    link.href = chapterUrl(chapter.number);
    link.textContent = chapter.title || `Chapter ${chapter.number}`;
    link.addEventListener("click", () => localStorage.setItem(LAST, String(chapter.number)));
    item.append(link);
    const note = document.createElement("span");
    note.className = "hint";
    const length = chapter.audio_ms ? ` · ${clock(chapter.audio_ms)}` : "";
    note.textContent = ` ${chapter.chosen ? chapter.state.replace("_", " ") : "not chosen"}${length}`;
    item.append(note);
    if (chapter.number === last) item.classList.add("current");
    list.append(item);
  }
  if (last) {
    $("resume").hidden = false;
    $("resume-link").href = chapterUrl(last);
    $("resume-link").textContent = `Continue with chapter ${last}`;
  }
  if (book.state === "done") {
    $("download").href = `/v1/books/${bookId}/audio.${book.format}`;
    $("download").hidden = false;
  }
  return book.state === "queued" || book.state === "generating";
}

async function refresh() {
  try {
    const reply = await fetch(`/v1/books/${bookId}`);
    if (!reply.ok) {
      $("status").textContent = reply.status === 404 ? "No such book." : "Cannot read the book.";
      return;
    }
    if (render(await reply.json())) setTimeout(refresh, POLL_MS);
  } catch {
    $("status").textContent = "The server cannot be reached; retrying…";
    setTimeout(refresh, POLL_MS);
  }
}

refresh();
