"""The hostile book set (`loadtest._hostile_books`: zip bombs, a 2 GB member declared small,
10,000 files or chapters, deep nesting, entity tricks, paths out of the root, text past the
caps) through HTTP: each gets a 400 in OpenAI's shape naming what was wrong, and the worker is
untouched (no job, no book). The reader's own refusals are tested in tests/books; here the
door's. How fast each answer comes is printed by `python -m loadtest.bench_books`; the ceiling
below only catches a reader that does the work it was meant to refuse."""

from __future__ import annotations

import time

import pytest
from litestar.testing import AsyncTestClient

from loadtest._hostile_books import HostileBook, hostile
from speechd.casts import schema
from speechd.durable import Store
from speechd.errors import BookTooLarge

CONTENT_TYPES = {
    "epub": "application/epub+zip",
    "markdown": "text/markdown",
    "text": "text/plain",
}
CEILING_S = 5.0  # 50x the 100 ms a refusal is meant to take: a reader that inflates the bomb


@pytest.mark.parametrize("case", hostile(), ids=lambda case: case.name)
async def test_a_hostile_book_is_refused_before_any_work(
    client: AsyncTestClient, store: Store, case: HostileBook
) -> None:
    started = time.monotonic()
    response = await client.post(
        "/v1/books", content=case.data, headers={"content-type": CONTENT_TYPES[case.kind]}
    )
    took = time.monotonic() - started
    assert response.status_code == 400, (case.name, response.text[:300])
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    expected = "book_too_large" if issubclass(case.error, BookTooLarge) else "bad_book"
    assert error["code"] == expected, (case.name, error)
    assert "Traceback" not in error["message"] and len(error["message"]) < 500
    assert took < CEILING_S, (case.name, took)
    assert await store.check_tail(schema.JOBS) == 0  # the worker was given nothing
