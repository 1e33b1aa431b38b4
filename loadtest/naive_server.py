"""BASELINE, not speechd: a naive TTS server that synthesizes the whole request, then answers.

    python -m loadtest.naive_server --port 8100 --model-dir ~/.cache/speechd/kokoro-82m

What a straightforward server does (and what speechd is measured against): `POST
/v1/audio/speech` plans the text into the longest chunks the model takes, synthesizes all of
them one request at a time (a lock, since the engine has one set of CPU threads), encodes the
whole audio and answers it with `Content-Length`. `GET /readyz` answers 200 once the model is
loaded. No store, no streaming, no sharing of identical requests, no error shapes: a yardstick.
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

from speechd.audio import content_type, new_encoder
from speechd.engine import EngineConfig, load_engine
from speechd.text import ChunkPolicy

from ._workload import VOICE

# One chunk per 510-token span: the fewest model calls, as a non-streaming server would make.
WHOLE = ChunkPolicy(first_tokens=510, first_max_tokens=510, min_tokens=510, rtf=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model-dir")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--engine", default="torch", choices=["auto", "torch", "onnx"])
    args = parser.parse_args()
    engine = load_engine(
        EngineConfig(
            model_dir=args.model_dir, device=args.device, threads=args.threads, engine=args.engine
        )
    )
    engine.warm_up(VOICE)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/readyz" else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            voice, fmt = request.get("voice", VOICE), request.get("response_format", "mp3")
            with lock:
                pcm = np.concatenate(
                    [
                        engine.synthesize(chunk, voice, 1.0, seed=chunk.index).pcm
                        for chunk in engine.plan(request["input"], voice, WHOLE)
                    ]
                )
            body = new_encoder(fmt, engine.sample_rate).encode(pcm, final=True)
            self.send_response(200)
            self.send_header("Content-Type", content_type(fmt))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # quiet: the load generator measures

    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
