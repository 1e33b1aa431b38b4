"""A live cast's input over HTTP: `POST /v1/casts` with `"live": true`, then
`POST /v1/casts/{id}/input`; every bad input answered in OpenAI's error shape, retries that
cannot duplicate text, and an idle input closed by its timeout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from speechd import casts
from speechd.api.app import create_app
from speechd.casts import schema
from speechd.config import Settings
from speechd.durable import EmbeddedStore
from speechd.service._requests import MAX_LIVE_CHARS, MAX_PIECE_CHARS
from speechd.worker import Worker
from tests.api.conftest import Clock


async def _live(http: AsyncTestClient, **fields: Any) -> dict[str, Any]:
    response = await http.post("/v1/casts", json={"live": True, "voice": "af_heart", **fields})
    assert response.status_code == 201, response.text
    return response.json()


async def _append(
    http: AsyncTestClient, cast: dict[str, Any], token: str | None = None, **body: Any
) -> Any:
    token = cast["input_token"] if token is None else token
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return await http.post(f"/v1/casts/{cast['id']}/input", json=body, headers=headers)


def _error(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) >= {"message", "type", "param", "code"}
    assert error["code"] == code
    return error


async def _input(store_dir: Path, cast_id: str) -> tuple[list[str | schema.InputEnd], int]:
    async with await EmbeddedStore.open(store_dir) as store:
        batch = await store.read(schema.input_stream(cast_id), 0)
        return [schema.input_event(r) for r in batch.records], batch.tail


async def test_a_live_cast_answers_with_its_input_link_and_token(client: AsyncTestClient) -> None:
    cast = await _live(client, input="Hello", title="A reply")
    assert set(cast) == {"id", "url", "status", "input_url", "input_token"}
    assert casts.is_cast_id(cast["id"])
    assert cast["url"] == f"http://testserver.local/c/{cast['id']}"
    assert cast["input_url"] == f"http://testserver.local/v1/casts/{cast['id']}/input"
    assert cast["status"] == "queued" and len(cast["input_token"]) >= 40
    again = await _live(client, input="Hello", title="A reply")
    assert again["id"] != cast["id"] and again["input_token"] != cast["input_token"]
    view = (await client.get(f"/v1/casts/{cast['id']}")).json()
    assert (view["title"], view["voice"]) == ("A reply", "af_heart")


async def test_pieces_append_in_order_and_done_closes_the_input(
    client: AsyncTestClient, store_dir: Path
) -> None:
    cast = await _live(client, input="Hello")
    first = await _append(client, cast, text=" there,", seq=1)
    assert first.status_code == 200, first.text
    assert first.json() == {
        "id": cast["id"],
        "seq": 2,
        "chars": 12,
        "done": False,
        "type": "input.accepted",
    }
    assert (await _append(client, cast, text=" friend")).json()["seq"] == 3  # seq is optional
    last = await _append(client, cast, text=".", done=True, seq=3)
    assert last.json() | {"type": None} == {
        "id": cast["id"],
        "seq": 4,
        "chars": 20,
        "done": True,
        "type": None,
    }
    events, _ = await _input(store_dir, cast["id"])
    assert events == ["Hello", " there,", " friend", ".", schema.InputEnd("done", 4, 20)]


async def test_a_retry_with_a_stale_seq_is_refused_with_the_seq_to_send(
    client: AsyncTestClient, store_dir: Path
) -> None:
    cast = await _live(client)
    assert (await _append(client, cast, text="One.", seq=0)).status_code == 200
    # The answer was lost; the client sends the same piece again.
    error = _error(await _append(client, cast, text="One.", seq=0), 409, "seq_mismatch")
    assert (error["seq"], error["param"]) == (1, "seq")
    ahead = _error(await _append(client, cast, text="Three.", seq=2), 409, "seq_mismatch")
    assert ahead["seq"] == 1
    assert (await _append(client, cast, text=" Two.", seq=1)).json()["seq"] == 2
    events, _ = await _input(store_dir, cast["id"])
    assert events == ["One.", " Two."]


async def test_after_done_text_is_refused_and_a_repeated_done_is_taken(
    client: AsyncTestClient,
) -> None:
    cast = await _live(client, input="All of it.")
    assert (await _append(client, cast, done=True)).json()["done"] is True
    error = _error(await _append(client, cast, text="More."), 409, "input_closed")
    assert error["seq"] == 1
    repeated = await _append(client, cast, done=True, seq=1)
    assert repeated.status_code == 200 and repeated.json()["seq"] == 1


async def test_every_bad_input_gets_its_error(client: AsyncTestClient) -> None:
    cast = await _live(client)
    plain = await client.post("/v1/casts", json={"input": "An ordinary cast.", "voice": "am_adam"})
    ordinary = {"id": plain.json()["id"], "input_token": cast["input_token"]}
    _error(await _append(client, ordinary, text="x"), 409, "cast_not_live")
    unknown = {"id": "A" * 22, "input_token": cast["input_token"]}
    _error(await _append(client, unknown, text="x"), 404, "cast_not_found")
    _error(await _append(client, {**unknown, "id": "no-such-id"}, text="x"), 404, "cast_not_found")
    _error(await _append(client, cast, token="wrong-token", text="x"), 401, "invalid_api_key")
    _error(await _append(client, cast, token="", text="x"), 401, "invalid_api_key")
    _error(await _append(client, cast, token="t" * 5000, text="x"), 401, "invalid_api_key")
    big = _error(
        await _append(client, cast, text="x" * (MAX_PIECE_CHARS + 1)), 413, "payload_too_large"
    )
    assert big["param"] == "text"
    huge = await client.post(
        f"/v1/casts/{cast['id']}/input",
        content=json.dumps({"text": "x" * (20 * MAX_PIECE_CHARS)}),
        headers={
            "authorization": f"Bearer {cast['input_token']}",
            "content-type": "application/json",
        },
    )
    _error(huge, 413, "payload_too_large")
    bell = _error(await _append(client, cast, text="a \x07 bell"), 400, None)
    assert bell["param"] == "text" and "U+0007" in bell["message"]
    assert _error(await _append(client, cast), 400, None)["param"] == "text"
    assert _error(await _append(client, cast, text="x", seq=-1), 400, None)["param"] == "seq"
    assert _error(await _append(client, cast, text=5), 400, None)["param"] == "text"
    # None of it reached the input.
    assert (await _append(client, cast, text="Fine.", seq=0)).json()["seq"] == 1


async def test_a_live_cast_past_the_total_limit_is_refused(client: AsyncTestClient) -> None:
    cast = await _live(client)
    piece = "word " * (MAX_PIECE_CHARS // 5)
    sent = 0
    while sent + len(piece) <= MAX_LIVE_CHARS:
        assert (await _append(client, cast, text=piece)).status_code == 200
        sent += len(piece)
    error = _error(await _append(client, cast, text=piece), 413, "input_too_long")
    assert error["param"] == "text"
    assert (await _append(client, cast, text="end.", done=True)).json()["chars"] == sent + 4


async def test_bad_live_requests_are_refused_before_anything_is_made(
    client: AsyncTestClient,
) -> None:
    for body, param in [
        ({"live": True, "voice": "nobody"}, "voice"),
        ({"live": True, "speed": 9}, "speed"),
        ({"live": True, "response_format": "ogg"}, "response_format"),
        ({"live": True, "model": "gpt-9"}, "model"),
        ({"live": True, "input": "a \x00 nul"}, "input"),
        ({"live": True, "input": "x" * (MAX_PIECE_CHARS + 1)}, "input"),
        ({"live": "yes"}, "live"),
    ]:
        response = await client.post("/v1/casts", json=body)
        assert 400 <= response.status_code < 500, (body, response.text)
        assert response.json()["error"]["param"] == param, body


async def test_an_idle_input_is_closed_by_its_timeout(
    client: AsyncTestClient, clock: Clock, store_dir: Path
) -> None:
    cast = await _live(client, input="Hello.")
    clock.skew_s = 61.0  # the default timeout is 60 s
    error = _error(await _append(client, cast, text=" More."), 409, "input_closed")
    assert "idle" in error["message"] and error["seq"] == 1
    events, _ = await _input(store_dir, cast["id"])
    assert events == ["Hello.", schema.InputEnd("idle", 1, 6)]


async def test_the_idle_timeout_is_a_setting_each_cast_keeps(
    store_dir: Path, worker: Worker, clock: Clock
) -> None:
    settings = Settings(data_dir=str(store_dir), live_idle_timeout=5.0)
    async with AsyncTestClient(create_app(settings, clock=clock)) as http:
        cast = await _live(http)
        clock.skew_s = 3.0
        assert (await _append(http, cast, text="Still here.")).status_code == 200
        clock.skew_s = 9.0
        _error(await _append(http, cast, text=" Gone."), 409, "input_closed")


async def test_api_keys_or_the_input_token_write_the_input(store_dir: Path, worker: Worker) -> None:
    settings = Settings(data_dir=str(store_dir), api_keys=("sk-one",))
    async with AsyncTestClient(create_app(settings)) as http:
        refused = await http.post("/v1/casts", json={"live": True})
        _error(refused, 401, "invalid_api_key")
        made = await http.post(
            "/v1/casts", json={"live": True}, headers={"authorization": "Bearer sk-one"}
        )
        cast = made.json()
        assert (await _append(http, cast, text="By token.")).status_code == 200
        assert (await _append(http, cast, token="sk-one", text=" By key.")).status_code == 200
        _error(await _append(http, cast, token="sk-two", text="x"), 401, "invalid_api_key")


async def test_the_input_stream_and_token_never_show_in_public_reads(
    client: AsyncTestClient,
) -> None:
    # What is spoken is public (captions, as for any cast); the input stream, its pieces
    # not yet spoken and the token are not.
    cast = await _live(client, input="Hello")
    await _append(client, cast, text=" there.", done=True)
    view = (await client.get(f"/v1/casts/{cast['id']}")).json()
    assert view["title"] == "Live cast"
    for path in ("", "/records", "/audio", "/events"):
        response = await client.get(f"/v1/casts/{cast['id']}{path}")
        assert cast["input_token"].encode() not in response.content
    page = (await client.get(f"/v1/casts/{cast['id']}/records")).json()
    events = {dict(r["headers"]).get("e") for r in page["records"]}
    assert "piece" not in events and "end" not in events
    assert not any(dict(r["headers"]).get("c") for r in page["records"])


@pytest.mark.parametrize("path", ["/v1/casts/input/x/records", "/v1/casts/..%2Finput%2Fx"])
async def test_no_path_reaches_the_input_stream(client: AsyncTestClient, path: str) -> None:
    assert (await client.get(path)).status_code == 404
