// The paste page: text, voice, speed, format -> POST /v1/casts -> the player at /c/<id>.

const $ = (id) => document.getElementById(id);
const KEY = "speechd.apiKey";

async function loadVoices() {
  try {
    const response = await fetch("/v1/audio/voices");
    if (!response.ok) return;
    const { voices } = await response.json();
    const select = $("voice");
    for (const voice of voices) {
      const option = document.createElement("option");
      option.value = voice.id;
      option.textContent = voice.name && voice.name !== voice.id ? `${voice.name} (${voice.id})` : voice.id;
      select.append(option);
    }
    const saved = localStorage.getItem("speechd.voice");
    if (saved && voices.some((v) => v.id === saved)) select.value = saved;
  } catch {
    // the default voice still works
  }
}

function showError(message) {
  const box = $("form-error");
  box.textContent = message;
  box.hidden = !message;
}

$("text").addEventListener("input", () => {
  $("count").textContent = $("text").value.length.toLocaleString();
});

$("speed").addEventListener("input", () => {
  $("speed-out").textContent = `${Number($("speed").value).toFixed(2)}×`;
});

$("cast-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  showError("");
  const body = {
    input: $("text").value,
    speed: Number($("speed").value),
    response_format: $("format").value,
  };
  if ($("voice").value) body.voice = $("voice").value;
  if ($("title").value.trim()) body.title = $("title").value.trim();
  const headers = { "content-type": "application/json" };
  const key = $("api-key").value || localStorage.getItem(KEY);
  if (key) headers.authorization = `Bearer ${key}`;
  $("submit").disabled = true;
  try {
    const response = await fetch("/v1/casts", { method: "POST", headers, body: JSON.stringify(body) });
    const reply = await response.json().catch(() => ({}));
    if (response.status === 401) {
      $("key-row").hidden = false;
      showError("This server needs an API key to create casts.");
      return;
    }
    if (!response.ok) {
      showError((reply.error && reply.error.message) || `The server answered ${response.status}.`);
      return;
    }
    if (key) localStorage.setItem(KEY, key);
    if (body.voice) localStorage.setItem("speechd.voice", body.voice);
    try {
      // The player shows this tab the text as sent, highlighted word by word (the server
      // never publishes it: a cast's public reads carry offsets into it, not the text).
      sessionStorage.setItem(`speechd.source.${reply.id}`, body.input);
    } catch {
      // full or refused: the player reads along in its captions instead
    }
    window.location.assign(`/c/${encodeURIComponent(reply.id)}`);
  } catch (error) {
    showError(`Could not reach the server: ${error.message}`);
  } finally {
    $("submit").disabled = false;
  }
});

loadVoices();
