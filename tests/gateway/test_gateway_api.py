"""The cast API: submitting (`POST /v1/casts`) and reading a cast's status."""

from __future__ import annotations

import httpx
import pytest
from gateway_support import asgi_client, make_app, make_gateway, new_cast

from speechd.durable import Store
from speechd.gateway import derive_title

TEXT = "The quick brown fox jumps over the lazy dog. Then it naps in the sun for an hour."


async def test_submit_returns_at_once_with_a_link(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/casts", json={"input": TEXT, "voice": "am_adam"})
    assert response.status_code == 201
    body = response.json()
    assert set(body) == {"id", "url", "status"}
    assert body["status"] == "queued"
    assert body["url"] == f"http://testserver.local/c/{body['id']}"


async def test_identical_requests_share_one_cast(client: httpx.AsyncClient) -> None:
    first = await client.post("/v1/casts", json={"input": TEXT, "voice": "am_adam"})
    again = await client.post("/v1/casts", json={"input": f"  {TEXT}\n", "voice": "am_adam"})
    other = await client.post("/v1/casts", json={"input": TEXT, "voice": "bf_emma"})
    assert again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    assert other.json()["id"] != first.json()["id"]


async def test_status_shows_public_facts_and_a_derived_title(client: httpx.AsyncClient) -> None:
    cid = (await client.post("/v1/casts", json={"input": TEXT, "speed": 1.25})).json()["id"]
    view = (await client.get(f"/v1/casts/{cid}")).json()
    assert view["status"] == "queued"
    assert view["title"] == "The quick brown fox jumps over the lazy dog."
    assert view["voice"] == "af_heart"
    assert view["speed"] == 1.25
    assert view["format"] == "mp3"
    assert view["created"] > 1_700_000_000
    assert view["progress"] == {
        "chunks_done": 0,
        "chunks_planned": None,
        "audio_seconds": 0.0,
        "lead_seconds": None,
    }
    assert "lazy dog. Then" not in (await client.get(f"/v1/casts/{cid}")).text


async def test_an_explicit_title_wins(client: httpx.AsyncClient) -> None:
    cid = (await client.post("/v1/casts", json={"input": TEXT, "title": "Fox"})).json()["id"]
    assert (await client.get(f"/v1/casts/{cid}")).json()["title"] == "Fox"


async def test_status_follows_progress(store: Store, client: httpx.AsyncClient) -> None:
    cast = await new_cast(store, ["One.", "Two.", "Three."])
    await cast.start()
    view = (await client.get(f"/v1/casts/{cast.id}")).json()
    assert view["status"] == "generating"
    assert view["progress"]["chunks_planned"] == 3
    await cast.chunk(0.5)
    await cast.chunk(0.5)
    view = (await client.get(f"/v1/casts/{cast.id}")).json()
    assert view["progress"]["chunks_done"] == 2
    assert view["progress"]["audio_seconds"] == 1.0
    assert view["progress"]["lead_seconds"] <= 1.0
    assert view["attempt"] == 1
    await cast.chunk(0.5)
    await cast.eos()
    view = (await client.get(f"/v1/casts/{cast.id}")).json()
    assert view["status"] == "done"
    assert view["progress"]["chunks_done"] == 3
    assert view["progress"]["audio_seconds"] == 1.5


async def test_status_of_a_failed_cast(store: Store, client: httpx.AsyncClient) -> None:
    cast = await new_cast(store, ["One."])
    await cast.start()
    await cast.error("the model ran out of memory")
    view = (await client.get(f"/v1/casts/{cast.id}")).json()
    assert view["status"] == "failed"
    assert view["error"] == "the model ran out of memory"


async def test_input_up_to_200000_characters(client: httpx.AsyncClient) -> None:
    text = ("word " * 40_000)[:200_000]
    ok = await client.post("/v1/casts", json={"input": text})
    assert ok.status_code == 201
    too_long = await client.post("/v1/casts", json={"input": text + "x"})
    assert too_long.status_code == 400
    assert too_long.json()["error"]["param"] == "input"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": ""}, "input"),
        ({"input": "   \n"}, "input"),
        ({"input": TEXT, "speed": 5}, "speed"),
        ({"input": TEXT, "speed": 0}, "speed"),
        ({"input": TEXT, "response_format": "ogg"}, "response_format"),
        ({"input": TEXT, "voice": "nobody"}, "voice"),
        ({"input": 42}, "input"),
        ({"voice": "af_heart"}, "input"),
    ],
)
async def test_bad_requests_are_rejected(
    client: httpx.AsyncClient, body: dict[str, object], param: str
) -> None:
    response = await client.post("/v1/casts", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    # The field is named in `param` (or, for a missing field, in the message).
    assert param in f"{error['param']} {error['message']}"


async def test_writes_need_a_key_when_keys_are_configured(store: Store) -> None:
    gateway = make_gateway(store, api_keys=frozenset({"sk-test"}))
    async with asgi_client(make_app(gateway)) as client:
        anonymous = await client.post("/v1/casts", json={"input": TEXT})
        assert anonymous.status_code == 401
        assert anonymous.json()["error"]["code"] == "invalid_api_key"
        wrong = await client.post(
            "/v1/casts", json={"input": TEXT}, headers={"authorization": "Bearer nope"}
        )
        assert wrong.status_code == 401
        ok = await client.post(
            "/v1/casts", json={"input": TEXT}, headers={"authorization": "Bearer sk-test"}
        )
        assert ok.status_code == 201
        # Reads stay public: the link is the capability.
        assert (await client.get(f"/v1/casts/{ok.json()['id']}")).status_code == 200


async def test_links_use_the_public_url_when_set(store: Store) -> None:
    gateway = make_gateway(store, public_url="https://speech.example.org/")
    async with asgi_client(make_app(gateway)) as client:
        body = (await client.post("/v1/casts", json={"input": TEXT})).json()
        assert body["url"] == f"https://speech.example.org/c/{body['id']}"
        view = (await client.get(f"/v1/casts/{body['id']}")).json()
        assert view["audio_url"] == f"https://speech.example.org/v1/casts/{body['id']}/audio"


@pytest.mark.parametrize(
    ("text", "title"),
    [
        ("Hello there. General Kenobi.", "Hello there."),
        ("  A first line\nand a second", "A first line"),
        ("no punctuation at all", "no punctuation at all"),
        ("word " * 50, " ".join(["word"] * 15) + "…"),
        ("x" * 200, "x" * 79 + "…"),
    ],
)
def test_derive_title(text: str, title: str) -> None:
    assert derive_title(text) == title
