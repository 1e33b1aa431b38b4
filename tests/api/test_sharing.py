"""Who shares a cast (issue 27 item 12): by default every identical request gets the same cast
(and so learns, by 200 against 201 and the same `X-Cast-Id`, that someone made it); with
`--share-casts per-key` only callers of one API key do, and another key's identical request
makes a cast of its own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from speechd.api import create_app
from speechd.config import Settings
from speechd.worker import Worker

CAST = {"input": "A text only one team should know was spoken.", "voice": "af_heart"}
SPEECH = {"model": "tts-1", "voice": "alloy", "input": CAST["input"], "response_format": "pcm"}
A = {"authorization": "Bearer key-a"}
B = {"authorization": "Bearer key-b"}


@pytest.fixture
async def clients(
    request: pytest.FixtureRequest, store_dir: Path, worker: Worker
) -> AsyncIterator[AsyncTestClient]:
    settings = Settings(
        data_dir=str(store_dir), api_keys=("key-a", "key-b"), share_casts=request.param
    )
    async with AsyncTestClient(create_app(settings)) as client:
        yield client


async def _made(client: AsyncTestClient, key: dict[str, str]) -> tuple[int, str]:
    answer = await client.post("/v1/casts", json=CAST, headers=key)
    assert answer.status_code in (200, 201), answer.text
    return answer.status_code, answer.json()["id"]


async def _spoken(client: AsyncTestClient, key: dict[str, str]) -> Any:
    answer = await client.post("/v1/audio/speech", json=SPEECH, headers=key)
    assert answer.status_code == 200 and answer.content
    return answer.headers["x-cast-id"]


@pytest.mark.parametrize("clients", ["per-key"], indirect=True)
async def test_per_key_casts_are_shared_only_within_a_key(clients: AsyncTestClient) -> None:
    first, a_id = await _made(clients, A)
    assert first == 201
    assert await _made(clients, A) == (200, a_id)  # the same key: the same cast
    other, b_id = await _made(clients, B)
    assert other == 201 and b_id != a_id  # another key learns nothing: a cast of its own
    assert await _made(clients, B) == (200, b_id)
    a_speech, b_speech = await _spoken(clients, A), await _spoken(clients, B)
    assert a_speech != b_speech
    assert len({a_id, b_id, a_speech, b_speech}) == 4  # speech and casts: other formats
    assert await _spoken(clients, A) == a_speech


@pytest.mark.parametrize("clients", ["all"], indirect=True)
async def test_by_default_every_caller_shares(clients: AsyncTestClient) -> None:
    first, a_id = await _made(clients, A)
    assert first == 201
    assert await _made(clients, B) == (200, a_id)
    assert await _spoken(clients, A) == await _spoken(clients, B)
