"""SSML `<voice>` and `xml:lang` through HTTP (the engine double's voices: af_bella, af_heart,
am_adam, bf_emma): a voice is checked against the workers' voices and the document's voices
are bounded before any work, an unknown one is a 400 in OpenAI's shape that names it, a
language no voice speaks is refused, and the voices a document resolves to are part of the
cast's identity."""

from __future__ import annotations

import pytest
from litestar.testing import AsyncTestClient

from speechd.api.app import create_app
from speechd.casts import schema
from speechd.config import Settings
from speechd.durable import Store
from speechd.limits import MAX_VOICE_CHARS
from speechd.text._ssml import MAX_VOICES
from speechd.worker import Worker
from tests.api.test_errors import assert_error

DIALOGUE = (
    "<speak><p>The night was cold. "
    '<voice name="am_adam">"Who goes there?" he called.</voice> Nobody answered.</p></speak>'
)
ROUTES = (("/v1/casts", {}), ("/v1/audio/speech", {"response_format": "pcm", "stream": False}))


async def test_a_document_with_voices_is_made(client: AsyncTestClient) -> None:
    made = await client.post("/v1/casts", json={"input": DIALOGUE, "voice": "af_heart"})
    assert made.status_code == 201, made.text
    assert "x-ssml-unsupported" not in made.headers
    speech = await client.post("/v1/audio/speech", json={"input": DIALOGUE, **ROUTES[1][1]})
    assert speech.status_code == 200 and speech.content


@pytest.mark.parametrize(("path", "extra"), ROUTES)
async def test_an_unknown_voice_is_a_400_naming_it_before_any_work(
    client: AsyncTestClient, store: Store, path: str, extra: dict
) -> None:
    text = DIALOGUE.replace("am_adam", "zz_nobody")
    error = assert_error(
        await client.post(path, json={"input": text, **extra}),
        400,
        param="input",
        code="voice_not_found",
    )
    assert "'zz_nobody'" in error["message"] and "am_adam" in error["message"]  # the choices
    assert f"at character {text.index('<voice')}" in error["message"]
    assert await store.check_tail(schema.JOBS) == 0  # nothing was made


@pytest.mark.parametrize(
    ("document", "says"),
    [
        ('<speak><voice name="' + "a" * (MAX_VOICE_CHARS + 1) + '">Hi</voice></speak>',
         f"at most {MAX_VOICE_CHARS} characters"),
        ("<speak>" + "".join(f'<voice name="af_heart({n + 1})">x</voice>'
                             for n in range(MAX_VOICES + 1)) + "</speak>",
         f"more than {MAX_VOICES} voices"),
        ("<speak><voice>Hi</voice></speak>", "needs a name"),
        ('<speak><p xml:lang="de-DE">Guten Tag</p></speak>', "no Kokoro voice speaks"),
        ('<speak><voice name="am_adam" xml:lang="tlh">Hi</voice></speak>', "no Kokoro voice"),
    ],
)  # fmt: skip
async def test_what_cannot_be_voiced_is_a_400_on_input(
    client: AsyncTestClient, store: Store, document: str, says: str
) -> None:
    for path, extra in ROUTES:
        error = assert_error(
            await client.post(path, json={"input": document, **extra}), 400, param="input"
        )
        assert says in error["message"], error
    assert await store.check_tail(schema.JOBS) == 0


async def test_as_many_voices_as_the_bound_allows_are_made(client: AsyncTestClient) -> None:
    # Blends count as names of their own: each one is resolved (and averaged by the worker).
    document = (
        "<speak>"
        + "".join(f'<voice name="af_heart({n + 1})+am_adam">x</voice>' for n in range(MAX_VOICES))
        + "</speak>"
    )
    made = await client.post("/v1/casts", json={"input": document})
    assert made.status_code == 201, made.text


async def test_a_language_no_worker_speaks_is_named(client: AsyncTestClient) -> None:
    # The engine double speaks English only: French text (xml:lang) is refused on `input`.
    document = '<speak>Hello. <s xml:lang="fr-FR">Bonjour.</s></speak>'
    error = assert_error(
        await client.post("/v1/casts", json={"input": document}),
        400,
        param="input",
        code="voice_unavailable",
    )
    assert "French" in error["message"]


async def test_inner_voices_are_part_of_the_cast(
    client: AsyncTestClient, settings: Settings, worker: Worker
) -> None:
    ids = set()
    for inner in ("am_adam", "bf_emma", "ash"):  # ash: OpenAI's name, an alias of am_adam
        made = await client.post("/v1/casts", json={"input": DIALOGUE.replace("am_adam", inner)})
        assert made.status_code == 201, made.text
        ids.add(made.json()["id"])
    assert len(ids) == 3
    again = await client.post("/v1/casts", json={"input": DIALOGUE})
    assert again.status_code == 200 and again.json()["id"] in ids
    # The same document where `ash` names another voice is another cast.
    aliased = DIALOGUE.replace("am_adam", "ash")
    remapped = Settings(**{**_fields(settings), "voice_map": {"ash": "bf_emma"}})
    async with _client(remapped) as other:
        made = await other.post("/v1/casts", json={"input": aliased})
        assert made.status_code == 201, made.text
        assert made.json()["id"] not in ids


def _fields(settings: Settings) -> dict:
    return {f: getattr(settings, f) for f in settings.__struct_fields__}


def _client(settings: Settings) -> AsyncTestClient:
    return AsyncTestClient(create_app(settings), base_url="http://testserver.local")
