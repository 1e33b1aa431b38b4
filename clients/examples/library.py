"""speechd_client, the library: speak into a file as the audio arrives.

    python clients/examples/library.py [OUT.wav]

SPEECHD_URL and SPEECHD_API_KEY as for the `speechd-client` command.
"""

import sys

from speechd_client import Client, SpeechdClientError

out = sys.argv[1] if len(sys.argv) > 1 else "speech.wav"
try:
    with Client() as client:
        with (
            client.speech("Hello from the speechd client.", response_format="wav") as audio,
            open(out, "wb") as sink,
        ):
            for data in audio:
                sink.write(data)
        print(f"wrote {out}; replay: {audio.cast_url}")
except SpeechdClientError as exc:
    sys.exit(f"error: {exc}")
