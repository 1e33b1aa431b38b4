#!/usr/bin/env bash
# speechd from curl: speak, cast, follow, records, voices. Writes hello.mp3 and cast.wav into
# the folder given (default: here). SPEECHD_URL names the server (default
# http://127.0.0.1:8000) and SPEECHD_API_KEY its key, if it was started with --api-key.
set -euo pipefail
url="${SPEECHD_URL:-http://127.0.0.1:8000}"
out="${1:-.}"
auth=()
if [ -n "${SPEECHD_API_KEY:-}" ]; then
  auth=(-H "Authorization: Bearer $SPEECHD_API_KEY")
fi

# Speak: the mp3 streams into the file while it is generated (-N: no buffering; -o - | mpv -
# plays it instead). -D - prints the headers, which name the cast: X-Cast-Id, X-Cast-Url.
curl -sfN -D - "$url/v1/audio/speech" "${auth[@]}" -H "Content-Type: application/json" \
  -d '{"model": "tts-1", "voice": "af_heart", "input": "Hello from speechd."}' \
  -o "$out/hello.mp3"

# Queue a cast (texts up to 200 000 characters); the answer is {"id", "url", "status"}.
cast=$(curl -sf "$url/v1/casts" "${auth[@]}" -H "Content-Type: application/json" \
  -d '{"input": "A longer text. It plays while the rest is made.", "response_format": "wav"}')
id=$(printf '%s' "$cast" | sed -E 's/.*"id": *"([^"]+)".*/\1/')
echo "cast: $cast"

# Its state and progress (chunks done of planned, audio seconds, the listener's lead).
curl -sf "$url/v1/casts/$id"; echo
# Its audio as one file, growing while the cast is generated.
curl -sfN "$url/v1/casts/$id/audio" -o "$out/cast.wav"
# Its records (meta, start, audio..., eos; bodies in base64) as JSON, up to max_records from
# seq_num; at the end of a cast still being made, wait up to 5 s for new ones (a long poll).
curl -sf "$url/v1/casts/$id/records?seq_num=0&max_records=2&wait=5"; echo

curl -sf "$url/v1/audio/voices"; echo
