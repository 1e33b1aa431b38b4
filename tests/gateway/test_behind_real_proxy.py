"""The manual's reverse-proxy settings (docs/operations/proxies.md), run for real (issue 14):
nginx and Caddy in front of speechd with exactly the configuration the page shows. Each
client is counted by the address the proxy saw, whatever it writes into `X-Forwarded-For`
itself, and live audio flows through the proxy as it is made (no buffering until the cast
ends), and so does a live cast's WebSocket.

Two clients are two loopback source addresses (127.0.0.1 and 127.0.0.2), so the proxy sees
two peers. Needs the Debian packages nginx-light and caddy (scripts/test.sh installs them).
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets
from gateway_support import LiveServer, StepEngine, serve, status_when, submit, until

from speechd.api.gateway import GatewaySettings
from speechd.casts import CastState
from speechd.casts.schema import JOBS
from speechd.config import Settings
from speechd.durable import Store
from speechd.worker import Worker
from tests.live._support import serve as serve_live

pytestmark = pytest.mark.slow

PAGE = Path(__file__).parents[2] / "docs" / "operations" / "proxies.md"
CAPS = GatewaySettings(max_client_streams=1, max_streams=8, client_header="x-forwarded-for")


def page_block(language: str) -> str:
    """The page's one fenced code block in `language` (```nginx, ```caddy)."""
    text = PAGE.read_text(encoding="utf-8")
    found = re.findall(rf"^```{language}\n(.*?)^```$", text, flags=re.S | re.M)
    assert len(found) == 1, f"{PAGE.name} has {len(found)} {language} blocks"
    return found[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def need(binary: str) -> str:
    path = shutil.which(binary) or (f"/usr/sbin/{binary}" if binary == "nginx" else None)
    if path is None or not Path(path).exists():
        pytest.fail(f"{binary} is not installed (Debian: apt-get install nginx-light caddy)")
    return path


@contextlib.contextmanager
def running(args: list[str], port: int, log: Path) -> Iterator[None]:
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"{args[0]} exited: {log.read_text(errors='replace')}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"{args[0]} never listened: {log.read_text()}")
            time.sleep(0.05)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def nginx(upstream: int, tmp: Path, *, port: int = 0, site: str = "") -> Iterator[str]:
    """nginx with the page's configuration in front of `upstream`, on `port` (else a free
    one); it answers every name (it has no `server_name`), `site` among them."""
    port = port or free_port()
    location = page_block("nginx").replace("127.0.0.1:8000", f"127.0.0.1:{upstream}")
    conf = tmp / "nginx.conf"
    conf.write_text(
        f"daemon off; worker_processes 1; pid {tmp}/nginx.pid; error_log {tmp}/error.log;\n"
        "events {}\n"
        f"http {{ access_log off; client_body_temp_path {tmp}/body; "
        f"proxy_temp_path {tmp}/proxy;\n"
        f"  server {{ listen 127.0.0.1:{port};\n{location}\n  }}\n}}\n"
    )
    with running([need("nginx"), "-c", str(conf), "-e", f"{tmp}/error.log"], port, tmp / "log"):
        yield f"http://127.0.0.1:{port}"


@contextlib.contextmanager
def caddy(upstream: int, tmp: Path, *, port: int = 0, site: str = "") -> Iterator[str]:
    """Caddy with the page's Caddyfile in front of `upstream`, on `port` (else a free one),
    for the site `site` (else 127.0.0.1)."""
    port = port or free_port()
    block = page_block("caddy")
    block = block.replace("127.0.0.1:8000", f"127.0.0.1:{upstream}")
    site = block.replace("speech.example.org", f"http://{site or '127.0.0.1'}:{port}", 1)
    conf = tmp / "Caddyfile"
    conf.write_text("{\n  admin off\n  auto_https off\n}\n" + site + "\n")
    env_home = tmp / "caddy-home"
    env_home.mkdir()
    args = [need("caddy"), "run", "--config", str(conf), "--adapter", "caddyfile"]
    with running(
        ["env", f"HOME={env_home}", f"XDG_DATA_HOME={env_home}", *args], port, tmp / "log"
    ):
        yield f"http://127.0.0.1:{port}"


PROXIES = {"nginx": nginx, "caddy": caddy}


@pytest.fixture
async def upstream(store: Store, worker: Worker) -> AsyncIterator[LiveServer]:
    async with serve(store, gateway=CAPS) as live:
        yield live


def client(url: str, source: str) -> httpx.AsyncClient:
    transport = httpx.AsyncHTTPTransport(local_address=source)
    return httpx.AsyncClient(base_url=url, transport=transport, timeout=30)


@pytest.mark.parametrize("proxy", sorted(PROXIES))
async def test_clients_are_counted_by_the_address_the_proxy_saw(
    proxy: str, store: Store, engine: StepEngine, upstream: LiveServer, tmp_path: Path
) -> None:
    engine.hold()
    with PROXIES[proxy](upstream.port, tmp_path) as url:
        async with client(url, "127.0.0.1") as a, client(url, "127.0.0.2") as b:
            cast_id = await submit(a, "A cast held before its first chunk.")
            await status_when(store, cast_id, lambda s: s.attempt == 1)
            events = f"/v1/casts/{cast_id}/events"
            async with a.stream("GET", events) as held:
                assert held.status_code == 200
                await until(lambda: upstream.gateway.slots.in_use == 1)
                # What a client writes into the header is left of what the proxy appends.
                spoofed = await a.get(events, headers={"x-forwarded-for": "198.51.100.7"})
                assert spoofed.status_code == 429, spoofed.text
                assert spoofed.json()["error"]["code"] == "too_many_streams"
                # Another peer of the proxy is another client, with its own slot.
                async with b.stream("GET", events) as other:
                    assert other.status_code == 200
            engine.run_free()


@pytest.mark.parametrize("proxy", sorted(PROXIES))
async def test_live_audio_flows_through_the_proxy_as_it_is_made(
    proxy: str, store: Store, engine: StepEngine, upstream: LiveServer, tmp_path: Path
) -> None:
    engine.hold()
    text = "One sentence comes first. Another one follows it. A third ends the cast."
    with PROXIES[proxy](upstream.port, tmp_path) as url:
        async with client(url, "127.0.0.1") as a:
            cast_id = await submit(a, text, response_format="pcm")
            engine.allow(1)
            async with a.stream("GET", f"/v1/casts/{cast_id}/audio") as audio:
                assert audio.status_code == 200
                pieces = audio.aiter_raw()
                first = await anext(pieces)
                # The first chunk's audio arrived while the cast is still being made.
                status = await status_when(store, cast_id, lambda s: s.chunks_done >= 1)
                assert first and status.state is not CastState.DONE
                engine.run_free()
                rest = b"".join([piece async for piece in pieces])
            whole = await a.get(f"/v1/casts/{cast_id}/audio")
            assert first + rest == whole.content


@pytest.mark.parametrize("proxy", sorted(PROXIES))
async def test_a_live_cast_over_the_websocket_through_the_proxy(
    proxy: str, store: Store, tmp_path: Path
) -> None:
    async with serve_live(store) as live:
        with PROXIES[proxy](live.port, tmp_path) as url:
            endpoint = url.replace("http://", "ws://") + "/v1/audio/speech/live"
            got: dict[str, Any] = {"audio": b"", "types": []}
            async with websockets.connect(endpoint) as ws:
                await ws.send(json.dumps({"voice": "af_heart", "response_format": "pcm"}))
                for piece in ("Text that comes ", "in pieces, through ", "the proxy."):
                    await ws.send(json.dumps({"type": "input.append", "text": piece}))
                await ws.send(json.dumps({"type": "input.done"}))
                async for message in ws:
                    if isinstance(message, bytes):
                        got["audio"] += message
                    else:
                        event = json.loads(message)
                        got["types"].append(event["type"])
                        got.setdefault(event["type"], event)
            assert "error" not in got["types"], got
            assert got["types"][0] == "cast" and got["types"][-1] == "speech.audio.done"
            async with httpx.AsyncClient(base_url=url, timeout=30) as http:
                whole = await http.get(f"/v1/casts/{got['cast']['id']}/audio")
            assert got["audio"] and got["audio"] == whole.content


@pytest.mark.parametrize("proxy", sorted(PROXIES))
async def test_a_page_of_the_public_url_posts_through_the_proxy(
    proxy: str, store: Store, worker: Worker, tmp_path: Path
) -> None:
    """The page's setup with `--public-url`: a browser page of the public site passes, while
    a page that reached the proxy by a name rebound to it makes nothing."""
    port = free_port()
    public = f"http://speech.example.org:{port}"
    settings = Settings(data_dir="unused", public_url=public, client_header="x-forwarded-for")
    async with serve(store, settings=settings) as upstream:
        with PROXIES[proxy](upstream.port, tmp_path, port=port, site="speech.example.org") as url:
            async with client(url, "127.0.0.1") as a:
                page = {"host": f"speech.example.org:{port}", "origin": public}
                made = await a.post("/v1/casts", json={"input": "From the page."}, headers=page)
                assert made.status_code == 201, made.text
                jobs = await store.check_tail(JOBS)
                rebound = f"evil.example:{port}"
                refused = await a.post(
                    "/v1/casts",
                    json={"input": "From another site's page."},
                    headers={"host": rebound, "origin": f"http://{rebound}"},
                )
                # speechd's 403, or the proxy's own answer for a site it does not serve.
                assert refused.status_code != 201, refused.text
                if proxy == "nginx":  # it forwards every name
                    assert refused.json()["error"]["code"] == "origin_not_allowed"
                assert await store.check_tail(JOBS) == jobs
