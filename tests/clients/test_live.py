"""Live casts from the clients: `live_cast()` with `append`/`done` (and a retry whose first try
was taken), `speechd-client say --live` reading stdin as it arrives, and the example that pipes
a streamed chat completion into a live cast (against a simulated chat server)."""

from __future__ import annotations

import contextlib
import http.server
import itertools
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from harness.servers import ROOT, LiveServer, free_port
from speechd_client import AsyncClient, Client, InputClosed

from ._support import CLI, audio_of, cli_env
from .conftest import KEY

_texts = itertools.count()


def tokens(words: int = 14) -> list[str]:
    """A reply no other test speaks, as a chat model streams it: words with their space."""
    n = next(_texts)
    words_ = [f"live{n}w{i}" + ("," if i % 5 == 4 else "") for i in range(words)]
    return [("" if i == 0 else " ") + w for i, w in enumerate(words_)] + ["."]


def spoken(client: Client, cast_id: str) -> str:
    """The captions of the cast's playable sequence, once it ended."""
    texts = [r.text or "" for r in client.follow_records(cast_id) if r.event == "audio"]
    return " ".join(t for t in texts if t)


def test_live_cast_appends_then_says_done(server: LiveServer) -> None:
    reply = tokens()
    with Client(server.url, api_key=KEY) as client:
        with client.live_cast(voice="af_heart", response_format="mp3") as cast:
            assert cast.url.endswith(f"/c/{cast.id}") and cast.input_token
            for token in reply:
                accepted = cast.append(token)
            assert accepted.seq == len(reply) and not accepted.done
        assert cast.closed and cast.seq == len(reply)
        with client.follow(cast.id) as audio:
            data = b"".join(audio)
        assert audio_of(data)[1] > 0
        assert spoken(client, cast.id).split() == "".join(reply).split()
        with pytest.raises(InputClosed) as closed:
            cast.append(" more")
        assert closed.value.seq == len(reply)


class _LoseFirstAnswer(httpx.BaseTransport):
    """Sends every request; for the first input append, drops the answer (as a broken
    connection would), so the client sends the same piece again."""

    def __init__(self) -> None:
        self._real = httpx.HTTPTransport()
        self.lost = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._real.handle_request(request)
        if request.url.path.endswith("/input") and not self.lost:
            response.read()
            self.lost += 1
            raise httpx.ReadError("the answer was lost", request=request)
        return response

    def close(self) -> None:
        self._real.close()


def test_a_piece_whose_answer_was_lost_is_not_doubled(server: LiveServer) -> None:
    transport = _LoseFirstAnswer()
    with Client(server.url, api_key=KEY, transport=transport) as client:
        cast = client.live_cast("Once", voice="af_heart")
        accepted = cast.append(" only.")  # taken, answer lost, sent again: 409, then fine
        assert transport.lost == 1 and accepted.seq == 2
        # A writer that lost count is told the seq the input holds.
        stale = httpx.post(
            cast.input_url,
            json={"text": "x", "seq": 0},
            headers={"authorization": f"Bearer {cast.input_token}"},
        )
        assert stale.status_code == 409 and stale.json()["error"]["seq"] == 2
        cast.done()
        assert spoken(client, cast.id).split() == ["Once", "only."]


async def test_the_async_live_cast(server: LiveServer) -> None:
    reply = tokens(6)
    async with AsyncClient(server.url, api_key=KEY) as client:
        async with await client.live_cast(voice="am_adam") as cast:
            for token in reply:
                await cast.append(token)
        async with client.follow(cast.id) as audio:
            data = b"".join([piece async for piece in audio])
    assert audio_of(data)[1] > 0


def test_say_live_reads_stdin_as_it_arrives(server: LiveServer, tmp_path: Path) -> None:
    reply = tokens(20)
    out = tmp_path / "reply.mp3"
    process = subprocess.Popen(
        [*CLI, "say", "--live", "--voice", "af_heart", "-o", str(out)],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(server.url, KEY),
    )
    assert process.stdin is not None
    for token in reply:  # as an LLM prints them, a pause now and then
        process.stdin.write(token.encode())
        process.stdin.flush()
        time.sleep(0.02)
    _, errors = process.communicate(timeout=120)
    assert process.returncode == 0, errors.decode()
    assert audio_of(out.read_bytes())[1] > 0


def test_say_live_wants_stdin(server: LiveServer) -> None:
    done = subprocess.run(
        [*CLI, "say", "--live", "some text", "-o", "x.mp3"],
        capture_output=True,
        env=cli_env(server.url, KEY),
        timeout=60,
    )
    assert done.returncode == 2 and b"stdin" in done.stderr


# -- the chat example, against a simulated OpenAI-compatible chat server ------------------------


class _Chat(http.server.BaseHTTPRequestHandler):
    reply: list[str] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        for n, token in enumerate(self.reply):
            chunk = {
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": "sim",
                "choices": [{"index": 0, "delta": {"content": token}, "finish_reason": None}],
            }
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
            time.sleep(0.2 if n == 5 else 0.01)  # a pause mid-sentence
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def _chat_server(reply: list[str]) -> Iterator[str]:
    handler = type("Chat", (_Chat,), {"reply": reply})
    port = free_port()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_the_chat_example_reads_a_streamed_reply_aloud(server: LiveServer, tmp_path: Path) -> None:
    reply = tokens(16)
    with _chat_server(reply) as chat_url:
        env = {**cli_env(server.url, KEY), "OPENAI_BASE_URL": chat_url, "OPENAI_API_KEY": "x"}
        done = subprocess.run(
            [sys.executable, str(ROOT / "clients" / "examples" / "chat_live.py"), "Hi", "r.mp3"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("wrote r.mp3; replay: " + server.url)
    assert "listen live: " in done.stderr
    assert audio_of((tmp_path / "r.mp3").read_bytes())[1] > 0
    cast_id = done.stdout.strip().rsplit("/", 1)[1]
    with Client(server.url, api_key=KEY) as client:
        assert spoken(client, cast_id).split() == "".join(reply).split()
