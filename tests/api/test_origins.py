"""Other sites' pages cannot use a visitor's speechd (issue 27 item 7): a body must be declared
JSON (415 otherwise, before anything is made: a page can send a `text/plain` or form POST
anywhere without asking), a browser's POST or WebSocket from another origin is refused (403,
or the WebSocket closed), and CORS answers only the origins `--allowed-origin` names. Clients
that are not browsers (no `Origin`) and the server's own pages go on as before."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from speechd.casts.schema import JOBS
from speechd.config import Settings, SettingsError, load_settings
from speechd.durable import EmbeddedStore, Store
from tests.live._support import LiveApp, serve

SPEECH = {"model": "tts-1", "voice": "alloy", "input": "Buy my thing.", "response_format": "pcm"}
CAST = {"input": "Fill the queue.", "voice": "af_heart"}
EVIL = "https://evil.example"


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    opened = await EmbeddedStore.open(tmp_path / "data")
    yield opened
    await opened.close()


def _openai_error(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and error["type"] == "invalid_request_error"
    assert isinstance(error["message"], str) and "param" in error


async def test_a_body_not_declared_json_gets_415_and_makes_nothing(store: Store) -> None:
    async with serve(store) as live, httpx.AsyncClient(base_url=live.url) as http:
        made = await http.post("/v1/casts", json={"live": True, "voice": "af_heart"})
        assert made.status_code == 201
        cast = made.json()
        jobs = await store.check_tail(JOBS)
        targets = [("/v1/audio/speech", SPEECH), ("/v1/casts", CAST)]
        targets.append((f"/v1/casts/{cast['id']}/input", {"text": "Hello"}))
        for path, body in targets:
            for kind in ("text/plain", "application/x-www-form-urlencoded", None, "text/json"):
                headers = {"authorization": f"Bearer {cast['input_token']}"}
                if kind is not None:
                    headers["content-type"] = kind
                answer = await http.post(path, content=json.dumps(body), headers=headers)
                _openai_error(answer, 415, "unsupported_media_type")
        assert await store.check_tail(JOBS) == jobs
        assert (await http.get(f"/v1/casts/{cast['id']}")).json()["progress"]["chunks_done"] == 0
        # JSON, with its charset, as every client sends it.
        answer = await http.post(
            "/v1/audio/speech",
            content=json.dumps(SPEECH),
            headers={"content-type": "application/json; charset=utf-8"},
        )
        assert answer.status_code == 200 and answer.content


async def test_another_sites_post_is_refused_and_the_servers_own_is_not(store: Store) -> None:
    async with serve(store) as live, httpx.AsyncClient(base_url=live.url) as http:
        jobs = await store.check_tail(JOBS)
        for path, body in [("/v1/audio/speech", SPEECH), ("/v1/casts", CAST)]:
            refused = await http.post(path, json=body, headers={"origin": EVIL})
            _openai_error(refused, 403, "origin_not_allowed")
            assert "access-control-allow-origin" not in refused.headers
        assert await store.check_tail(JOBS) == jobs
        # Its own pages (the paste page posts /v1/casts), and clients that send no Origin.
        own = await http.post("/v1/casts", json=CAST, headers={"origin": live.url})
        assert own.status_code == 201
        assert (await http.post("/v1/audio/speech", json=SPEECH)).status_code == 200
        # Reading is for everyone with the link.
        cast_id = own.json()["id"]
        assert (await http.get(f"/v1/casts/{cast_id}", headers={"origin": EVIL})).status_code == 200
        # No CORS unless asked for: a preflight gets no permission.
        preflight = await http.options(
            "/v1/casts",
            headers={"origin": EVIL, "access-control-request-method": "POST"},
        )
        assert "access-control-allow-origin" not in preflight.headers


async def test_allowed_origins_get_cors_and_their_posts_through(store: Store) -> None:
    settings = Settings(data_dir="unused", allowed_origins=("https://app.example",))
    async with (
        serve(store, settings=settings) as live,
        httpx.AsyncClient(base_url=live.url) as http,
    ):
        app = {"origin": "https://app.example"}
        preflight = await http.options(
            "/v1/casts",
            headers={
                **app,
                "access-control-request-method": "POST",
                "access-control-request-headers": "content-type, authorization",
            },
        )
        assert preflight.status_code in (200, 204)
        assert preflight.headers["access-control-allow-origin"] == "https://app.example"
        made = await http.post("/v1/casts", json=CAST, headers=app)
        assert made.status_code == 201
        assert made.headers["access-control-allow-origin"] == "https://app.example"
        assert "x-cast-id" in made.headers["access-control-expose-headers"].lower()
        _openai_error(
            await http.post("/v1/casts", json=CAST, headers={"origin": EVIL}),
            403,
            "origin_not_allowed",
        )


async def _first_message(live: LiveApp, origin: str | None) -> dict[str, Any]:
    async with websockets.connect(live.ws, origin=origin) as ws:  # type: ignore[arg-type]
        await ws.send(json.dumps({"voice": "af_heart"}))
        message: dict[str, Any] = json.loads(await ws.recv())
        return message


async def test_another_sites_websocket_is_refused(store: Store) -> None:
    async with serve(store) as live:
        jobs = await store.check_tail(JOBS)
        with pytest.raises((websockets.InvalidStatus, websockets.ConnectionClosed)):
            await _first_message(live, EVIL)
        assert await store.check_tail(JOBS) == jobs
        for origin in (live.url, None):  # its own pages, and clients that are not browsers
            message = await _first_message(live, origin)
            assert message["type"] == "cast" and message["input_token"]


async def _rebound_websocket(live: LiveApp, name: str) -> dict[str, Any]:
    """The first message of a live-cast WebSocket opened by a page at `http://<name>:port`
    that reached the server by `name` (its `Host`): the connection goes to 127.0.0.1, as a
    name rebound to it would."""
    uri = f"ws://{name}:{live.port}/v1/audio/speech/live"
    origin = f"http://{name}:{live.port}"
    async with websockets.connect(
        uri,
        origin=origin,  # type: ignore[arg-type]
        host="127.0.0.1",
        port=live.port,
    ) as ws:
        await ws.send(json.dumps({"voice": "af_heart"}))
        message: dict[str, Any] = json.loads(await ws.recv())
        return message


async def test_a_page_that_rebinds_its_name_to_the_server_is_refused(store: Store) -> None:
    """DNS rebinding: a page at evil.example:PORT whose name resolves to 127.0.0.1 once it
    has loaded sends `Origin` and `Host` both evil.example:PORT. Its POSTs and its
    WebSocket are refused; the names the server answers to by itself go on working."""
    async with serve(store) as live, httpx.AsyncClient(base_url=live.url) as http:
        jobs = await store.check_tail(JOBS)
        rebound = f"evil.example:{live.port}"
        page = {"host": rebound, "origin": f"http://{rebound}"}
        for path, body in [("/v1/audio/speech", SPEECH), ("/v1/casts", CAST)]:
            refused = await http.post(path, json=body, headers=page)
            _openai_error(refused, 403, "origin_not_allowed")
            message = refused.json()["error"]["message"]
            assert "'evil.example'" in message and "--allowed-host evil.example" in message
            assert "\n" not in message
        with pytest.raises((websockets.InvalidStatus, websockets.ConnectionClosed)):
            await _rebound_websocket(live, "evil.example")
        assert await store.check_tail(JOBS) == jobs
        # What it answers to by itself: an address (a page is only served from one by that
        # address), localhost, this machine's own name.
        names = ["127.0.0.1", "localhost", "app.localhost", "192.168.1.20", "[::1]"]
        names += [socket.gethostname().lower()]
        for name in names:
            own = {"host": f"{name}:{live.port}", "origin": f"http://{name}:{live.port}"}
            made = await http.post("/v1/casts", json=CAST, headers=own)
            assert made.status_code in (200, 201), (name, made.text)
        assert (await _rebound_websocket(live, "localhost"))["type"] == "cast"
        # Clients that are not browsers (no Origin) reach it by any name: a container's
        # service name, say.
        speech = await http.post("/v1/audio/speech", json=SPEECH, headers={"host": rebound})
        assert speech.status_code == 200


async def test_allowed_hosts_and_the_public_urls_host_are_answered(store: Store) -> None:
    settings = Settings(
        data_dir="unused",
        allowed_hosts=("speech.lan",),
        public_url="https://speech.example.org",
    )
    async with (
        serve(store, settings=settings) as live,
        httpx.AsyncClient(base_url=live.url) as http,
    ):
        for name in ("speech.lan", "SPEECH.LAN.", "speech.example.org"):
            page = {"host": f"{name}:{live.port}", "origin": f"http://{name}:{live.port}"}
            made = await http.post("/v1/casts", json=CAST, headers=page)
            assert made.status_code in (200, 201), (name, made.text)
        assert (await _rebound_websocket(live, "speech.lan"))["type"] == "cast"
        other = {"host": f"other.lan:{live.port}", "origin": f"http://other.lan:{live.port}"}
        _openai_error(
            await http.post("/v1/casts", json=CAST, headers=other), 403, "origin_not_allowed"
        )
    anywhere = Settings(data_dir="unused", allowed_hosts=("*",))
    async with (
        serve(store, settings=anywhere) as live,
        httpx.AsyncClient(base_url=live.url) as http,
    ):
        page = {"host": f"other.lan:{live.port}", "origin": f"http://other.lan:{live.port}"}
        assert (await http.post("/v1/casts", json=CAST, headers=page)).status_code in (200, 201)


def test_allowed_hosts_are_names() -> None:
    assert load_settings({"allowed_hosts": ("Speech.LAN.", "*")}, environ={}).allowed_hosts == (
        "speech.lan",
        "*",
    )
    env = {"SPEECHD_ALLOWED_HOST": "a.lan, b.lan"}
    assert load_settings({}, environ=env).allowed_hosts == ("a.lan", "b.lan")
    for bad in ("http://speech.lan", "speech.lan:8000", "a b", "x" * 64):
        with pytest.raises(SettingsError, match="--allowed-host / SPEECHD_ALLOWED_HOST"):
            load_settings({"allowed_hosts": (bad,)}, environ={})
