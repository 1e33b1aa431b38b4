"""The text front end through HTTP (the engine double plans every text as plain words): SSML
is recognised, checked whole and refused in OpenAI's shape before any work, elements outside
the subset are named once, and how a text is read is part of the cast's identity."""

from __future__ import annotations

import time

import pytest
from litestar.testing import AsyncTestClient

from speechd.casts import schema
from speechd.durable import Store


async def read_recipe(store: Store, cast_id: str) -> schema.Recipe:
    record = (await store.read(schema.catalog_stream(cast_id), 0)).records[0]
    return schema.decode(record.body, schema.Recipe)


SSML = '<speak>Hello <break time="1s"/> there, <audio src="x">friend</audio>.</speak>'


async def test_ssml_is_read_and_unsupported_elements_are_named_once(
    client: AsyncTestClient, store: Store
) -> None:
    more = '<audio src="y"/><voice name="am_adam" gender="male">x</voice></speak>'
    body = {"input": SSML.replace("</speak>", more)}
    made = await client.post("/v1/casts", json=body)
    assert made.status_code == 201, made.text
    assert made.headers["x-ssml-unsupported"] == "audio, voice gender"
    recipe = await read_recipe(store, made.json()["id"])
    assert (recipe.input_format, recipe.normalize) == ("ssml", True)
    plain = await client.post("/v1/casts", json={"input": "Hello there."})
    assert "x-ssml-unsupported" not in plain.headers
    speech = await client.post(
        "/v1/audio/speech", json={"input": SSML, "response_format": "pcm", "stream": False}
    )
    assert speech.status_code == 200 and speech.headers["x-ssml-unsupported"] == "audio"


async def test_how_a_text_is_read_is_part_of_the_cast(client: AsyncTestClient) -> None:
    ids = set()
    for extra in ({}, {"normalize": False}, {"input_format": "text"}):
        made = await client.post("/v1/casts", json={"input": SSML, **extra})
        assert made.status_code == 201, (extra, made.text)
        ids.add(made.json()["id"])
    assert len(ids) == 3
    # Absent, SSML is recognised by its start: the same cast as saying so.
    again = await client.post("/v1/casts", json={"input": SSML, "input_format": "ssml"})
    assert again.status_code == 200 and again.json()["id"] in ids
    # Whitespace at the start moves every word's offset: another cast; at the end it does not.
    first = (await client.post("/v1/casts", json={"input": "Hi there."})).json()["id"]
    assert (await client.post("/v1/casts", json={"input": "Hi there.\n"})).json()["id"] == first
    assert (await client.post("/v1/casts", json={"input": "  Hi there."})).json()["id"] != first


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("<speak>Hello", "not closed"),
        ('<!DOCTYPE speak [<!ENTITY x "y">]><speak>&x;</speak>', "DTD"),
        ("<speak>&lol;</speak>", "entity"),
        ('<speak><break time="1h"/></speak>', "500ms or 2s"),
        ('<speak><phoneme alphabet="ipa" ph="\u01c2">x</phoneme></speak>', "U+01C2"),
        ('<speak><prosody rate="2000%">Hi</prosody></speak>', "outside 0.25 to 4.0"),
        ('<speak xml:lang="ja-JP">Hello there, how are you today?</speak>', "Japanese"),
        ("<speak><break/></speak>", "no text"),
    ],
)
async def test_bad_ssml_is_a_400_on_input(client: AsyncTestClient, text: str, says: str) -> None:
    for path, extra in (("/v1/casts", {}), ("/v1/audio/speech", {"speed": 0.5})):
        response = await client.post(path, json={"input": text, **extra})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == "input" and says in error["message"], error
        assert error["type"] == "invalid_request_error"


def hostile(pattern: str, n: int) -> str:
    return (pattern * (n // len(pattern) + 1))[:n]


@pytest.mark.parametrize(
    "text",
    [
        "<speak>" + "<s>" * 10_000,
        "<speak>" + hostile("<s></s>", 199_000) + "</speak>",
        '<speak><s a="' + "x" * 199_000 + '">x</s></speak>',
        "<speak>" + hostile("<s a='1' ", 199_000),
    ],
)
async def test_hostile_ssml_is_refused_quickly(
    client: AsyncTestClient, store: Store, text: str
) -> None:
    started = time.monotonic()
    response = await client.post("/v1/casts", json={"input": text})
    assert time.monotonic() - started < 5  # tens of ms, on a loaded box a little more
    assert response.status_code == 400 and response.json()["error"]["param"] == "input"
    assert await store.check_tail(schema.JOBS) == 0  # nothing was made


async def test_text_a_voice_cannot_read_gets_a_clear_answer(client: AsyncTestClient) -> None:
    response = await client.post(
        "/v1/casts", json={"input": "Привет, как дела? Всё хорошо, спасибо.", "voice": "af_heart"}
    )
    assert response.status_code == 400
    assert "Cyrillic" in response.json()["error"]["message"]


async def test_a_live_cast_takes_plain_text(client: AsyncTestClient, store: Store) -> None:
    refused = await client.post(
        "/v1/casts", json={"live": True, "input_format": "ssml", "input": "<speak>"}
    )
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "input_format"
    made = await client.post("/v1/casts", json={"live": True, "normalize": False})
    assert made.status_code == 201, made.text
    recipe = await read_recipe(store, made.json()["id"])
    assert recipe.live and not recipe.normalize


def breaks_then(n: int, tail: str = "Hi.") -> str:
    """`n` ten-second breaks, then `tail`: a document that asks for far more silence than
    speech."""
    return "<speak>" + '<break time="10s"/>' * n + tail + "</speak>"


async def test_a_document_of_breaks_is_refused_before_any_work(
    client: AsyncTestClient, store: Store
) -> None:
    # 3,989 characters that once answered 35 minutes of silence in one chunk (a 191 MiB
    # array), and 95 KB of breaks that once asked for 13.9 hours of it.
    speech = breaks_then(209)
    assert len(speech) == 3_989
    for path, text, says in (
        ("/v1/audio/speech", speech, "2,090.0 s, more than its text allows"),
        ("/v1/casts", breaks_then(4_990), "at most 60 minutes in all"),
    ):
        response = await client.post(path, json={"input": text, "response_format": "pcm"})
        assert response.status_code == 400, (path, response.text[:300])
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error" and error["param"] == "input"
        assert says in error["message"], error
    assert await store.check_tail(schema.JOBS) == 0  # nothing was made


async def test_pauses_within_the_bound_are_taken(client: AsyncTestClient) -> None:
    # A minute of pause is free; beyond it, a second for each letter or digit spoken.
    letters = "Breathe in slowly. " * 4  # 60 letters: two minutes of pause in all
    for text, code in ((breaks_then(12, letters), 201), (breaks_then(13, letters), 400)):
        response = await client.post("/v1/casts", json={"input": text})
        assert response.status_code == code, response.text[:300]
