"""The paste page, the player page and the static files they load."""

from __future__ import annotations

import typing

import httpx

import speechd.api.gateway
from speechd.api.gateway._wire import NewCast
from speechd.audio import FORMATS
from speechd.limits import MAX_CAST_CHARS
from tests.api.gateway._support import submit


async def test_paste_page(http: httpx.AsyncClient) -> None:
    page = await http.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["referrer-policy"] == "no-referrer"
    assert '<form id="cast-form"' in page.text
    assert 'src="/static/paste.js"' in page.text
    assert f'maxlength="{MAX_CAST_CHARS}"' in page.text


async def test_player_page_escapes_the_title(http: httpx.AsyncClient) -> None:
    cast_id = await submit(http, "One.", title="<script>alert(1)</script> & co")
    page = await http.get(f"/c/{cast_id}")
    assert page.status_code == 200
    assert f'data-cast-id="{cast_id}"' in page.text
    assert "<script>alert(1)</script>" not in page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; co" in page.text
    assert 'src="/static/player.js"' in page.text


async def test_player_page_of_no_cast(http: httpx.AsyncClient) -> None:
    for cid in ("AAAAAAAAAAAAAAAAAAAAAA", "nope", "<b>x<b>"):
        page = await http.get(f"/c/{cid}")
        assert page.status_code == 404
        assert "No such cast" in page.text
        assert "<b>x<b>" not in page.text


async def test_static_files_are_an_allowlist(http: httpx.AsyncClient) -> None:
    for name, kind in (
        ("player.js", "text/javascript"),
        ("timeline.js", "text/javascript"),
        ("decode.js", "text/javascript"),
        ("paste.js", "text/javascript"),
        ("speechd.css", "text/css"),
    ):
        response = await http.get(f"/static/{name}")
        assert response.status_code == 200, name
        assert response.headers["content-type"].startswith(kind)
        assert response.content
    for name in ("nope.js", "__init__.py", "_pages.py", "%2e%2e"):
        assert (await http.get(f"/static/{name}")).status_code == 404


def test_request_formats_are_the_encoders_formats() -> None:
    assert typing.get_args(typing.get_type_hints(NewCast)["response_format"]) == FORMATS


def test_public_surface() -> None:
    assert sorted(speechd.api.gateway.__all__) == ["Gateway", "GatewaySettings", "gateway_router"]
    for name in speechd.api.gateway.__all__:
        assert hasattr(speechd.api.gateway, name)
