"""Stream speech into a file with the official `openai` SDK pointed at speechd.

    python clients/examples/openai_stream.py [OUT.mp3]

SPEECHD_URL names the server (default http://127.0.0.1:8000; the SDK wants its /v1) and
SPEECHD_API_KEY its key, if it was started with --api-key (any value otherwise).
"""

import os
import sys

from openai import OpenAI

server = os.environ.get("SPEECHD_URL", "http://127.0.0.1:8000").rstrip("/")
client = OpenAI(base_url=f"{server}/v1", api_key=os.environ.get("SPEECHD_API_KEY") or "unused")
out = sys.argv[1] if len(sys.argv) > 1 else "speech.mp3"

# The bytes reach the file while the rest of the speech is still being generated.
with client.audio.speech.with_streaming_response.create(
    model="tts-1",
    voice="af_heart",
    input="Streaming speech from speechd, through the OpenAI SDK.",
    response_format="mp3",
) as response:
    response.stream_to_file(out)
    print(f"wrote {out}; replay: {response.headers['X-Cast-Url']}")
