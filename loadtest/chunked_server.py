"""BASELINE, not speechd: Kokoro-FastAPI-style whole-chunk serving.

    python -m loadtest.chunked_server --port 8100 --model-dir ~/.cache/speechd/kokoro-82m
    python -m loadtest.chunked_server --port 8100 --cost-model 1.3,0.4     # a slow device

What Kokoro-FastAPI does with a streaming request (remsky/Kokoro-FastAPI,
`api/src/services/text_processing/text_processor.py` `smart_split`, and
`api/src/services/tts_service.py`): it splits the text at sentence ends into chunks of 175-250
tokens, synthesizes them one after the other, and streams each one as soon as it is made.
Its synthesis blocks the event loop, so concurrent requests take turns a whole chunk at a time,
in the order they came back to the loop: here a FIFO lock that each request takes for one
chunk. No store, no admission, no quantum, no first-chunk trick, no sharing: a yardstick.
`POST /v1/audio/speech` answers with chunked transfer; `GET /readyz` is 200 once loaded.
"""

from __future__ import annotations

import argparse
import collections
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from speechd.audio import content_type, new_encoder
from speechd.text import ChunkPolicy

from ._workload import VOICE

#: Kokoro-FastAPI's smart_split: sentences gathered into chunks of 175 to 250 tokens.
KFASTAPI = ChunkPolicy(
    first_tokens=250,
    first_max_tokens=250,
    min_tokens=175,
    sentence_tokens=250,
    max_tokens=250,
    rtf=0,
)


class FairLock:
    """A lock granted in the order it was asked for (a `threading.Lock` grants in any)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: collections.deque[object] = collections.deque()

    def __enter__(self) -> None:
        me = object()
        with self._cond:
            self._queue.append(me)
            self._cond.wait_for(lambda: self._queue[0] is me)

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._queue.popleft()
            self._cond.notify_all()


def _engine(args: argparse.Namespace) -> Any:
    if args.cost_model:
        from ._slow import SlowEngine

        rtf, overhead = (float(v) for v in args.cost_model.split(","))
        engine: Any = SlowEngine(rtf=rtf, overhead_s=overhead)
    else:
        from speechd.engine import EngineConfig, load_engine

        engine = load_engine(
            EngineConfig(model_dir=args.model_dir, device=args.device, threads=args.threads)
        )
    engine.warm_up(VOICE)
    return engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model-dir")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--cost-model", help="RTF,OVERHEAD: the slow-device cost model instead")
    args = parser.parse_args()
    engine = _engine(args)
    turns = FairLock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/readyz" else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            voice, fmt = request.get("voice", VOICE), request.get("response_format", "mp3")
            encoder = new_encoder(fmt, engine.sample_rate)
            chunks = list(engine.plan(request["input"], voice, KFASTAPI))
            self.send_response(200)
            self.send_header("Content-Type", content_type(fmt))
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for n, chunk in enumerate(chunks):
                with turns:
                    pcm = engine.synthesize(chunk, voice, 1.0, seed=chunk.index).pcm
                body = encoder.encode(np.asarray(pcm, np.float32), final=n == len(chunks) - 1)
                if body:
                    self.wfile.write(f"{len(body):x}\r\n".encode() + body + b"\r\n")
                    self.wfile.flush()
            if not chunks:
                body = encoder.encode(np.zeros(0, np.float32), final=True)
                if body:
                    self.wfile.write(f"{len(body):x}\r\n".encode() + body + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def log_message(self, format: str, *args: object) -> None:
            pass  # quiet: the load generator measures

    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
