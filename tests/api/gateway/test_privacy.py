"""Only `pub/casts/*` is reachable, and only the captions of chunks already published.

Every private stream gets a marker; every request (traversal tricks included) is checked for
all of them. The unspoken part of the text is a marker too, until the worker publishes its
chunk: that positive control proves the check can see text when it is there."""

from __future__ import annotations

import asyncio
import base64
import contextlib

import httpx
import pytest

from speechd.casts import CastState, deployment_secret
from speechd.casts.schema import (
    JOBS,
    JOBS_CURSOR,
    PROGRESS_DONE,
    Receipt,
    WorkerNotice,
    catalog_stream,
    encode,
    worker_stream,
)
from speechd.durable import AppendRecord, Store
from tests.api.gateway._support import (
    LiveServer,
    RawResponse,
    StepEngine,
    raw_get,
    status_when,
    submit,
)

UNSPOKEN = "Zebra-unspoken-7f3a"
JOB_MARK = "job-marker-91c2"
CURSOR_MARK = "cursor-marker-5d0e"
RECEIPT_MARK = "receipt-marker-c4b8"
WORKER_MARK = "worker-marker-a6f1"
# The title is the first line; the worker's first chunk is "Public opening", its second the rest.
TEXT = f"Public opening words.\n{UNSPOKEN} closes it."
PRIVATE = (JOB_MARK, CURSOR_MARK, RECEIPT_MARK, WORKER_MARK)


class Seen:
    def __init__(self, secret: bytes) -> None:
        self.secret_forms = (
            secret.hex(),
            base64.b64encode(secret).decode(),
            base64.urlsafe_b64encode(secret).decode().rstrip("="),
        )
        self.texts: list[str] = []

    def add(self, *parts: object) -> None:
        for part in parts:
            if isinstance(part, bytes):
                part = part.decode("latin-1")
            self.texts.append(str(part))

    def add_response(self, response: httpx.Response | RawResponse) -> None:
        self.add(dict(response.headers), getattr(response, "content", b""))
        if isinstance(response, RawResponse):
            self.add(response.body)

    @property
    def everything(self) -> str:
        text = "\n".join(self.texts)
        # Bodies travel as base64 inside JSON; decode every base64-looking run too.
        decoded = []
        for word in text.replace('"', " ").split():
            with contextlib.suppress(ValueError):
                decoded.append(base64.b64decode(word, validate=True).decode("latin-1"))
        return text + "\n".join(decoded)

    def assert_private(self, *, spoken: bool) -> None:
        everything = self.everything
        for mark in PRIVATE:
            assert mark not in everything
        for form in self.secret_forms:
            assert form not in everything
        assert (UNSPOKEN in everything) is spoken


async def _private_streams(store: Store, cast_id: str) -> None:
    await store.append(JOBS, [AppendRecord(JOB_MARK.encode())])
    await store.append(
        JOBS_CURSOR, [AppendRecord(f'{{"offset": 0, "m": "{CURSOR_MARK}"}}'.encode())]
    )
    await store.append(
        PROGRESS_DONE, [AppendRecord(encode(Receipt(cast_id, 1, RECEIPT_MARK, 1, 1, 1, 1.0)))]
    )
    await store.append(
        worker_stream("marked"),
        [AppendRecord(encode(WorkerNotice("ready", WORKER_MARK, 0)))],
    )


async def _bounded(coro: object, seconds: float = 0.6) -> None:
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(coro, seconds)  # type: ignore[arg-type]


async def _stream_for_a_while(http: httpx.AsyncClient, url: str, seen: Seen) -> None:
    async def read() -> None:
        async with http.stream("GET", url) as response:
            seen.add(dict(response.headers))
            async for data in response.aiter_bytes():
                seen.add(data)

    await _bounded(read())


def _targets(cid: str) -> list[str]:
    catalog = catalog_stream(cid)
    enc = catalog.replace("/", "%2F")
    return [
        "/v1/casts/jobs",
        "/v1/casts/jobs/records",
        "/v1/casts/../jobs/records",
        "/v1/casts/..%2Fjobs/records",
        "/v1/casts/%2e%2e%2fjobs/records",
        "/v1/casts/%2E%2E%2Fjobs/events",
        "/v1/casts/%252e%252e%252fjobs/records",
        "/v1/casts/..%252Fjobs/audio",
        f"/v1/casts/..%2F..%2F{enc}/records",
        f"/v1/casts/{cid}/../../{catalog}/records",
        f"/v1/casts/{cid}%2F..%2F..%2F{enc}/records",
        f"/v1/casts/{cid}/..%2F..%2F..%2F{enc}",
        f"/v1/casts/{enc}",
        f"/v1/casts/{enc}/records",
        "/v1/casts/_cursor/records",
        "/v1/casts/jobs%2F_cursor/records",
        "/v1/casts/progress%2Fdone/records",
        "/v1/casts/config%2Fsecret/records",
        "/v1/casts/workers%2Fw1/events",
        f"/v1/casts/{'A' * 5000}/records",
        f"/v1/casts/{cid}A/records",
        f"/v1/casts/{cid[:-1]}/audio",
        f"/v1/casts/{cid[:-1]}%00/records",
        f"/v1/casts/{cid}%20/records",
        f"/v1/casts/{cid[:-1]}%D0%90/records",  # a Cyrillic A: same length in characters
        "/v1/casts/AAAAAAAAAAAAAAAAAAAAAA",  # a well-formed id of no cast
        "/v1/casts/AAAAAAAAAAAAAAAAAAAAAA/records",
        "/v1/casts/AAAAAAAAAAAAAAAAAAAAAA/events",
        "/v1/casts/AAAAAAAAAAAAAAAAAAAAAA/audio",
        "/c/..%2Fjobs",
        f"/c/..%2F..%2F{enc}",
        "/c/AAAAAAAAAAAAAAAAAAAAAA",
        "/static/..%2F_gateway.py",
        "/static/../_gateway.py",
        "/static/%2e%2e%2f__init__.py",
        "/static/..%252F_pages.py",
    ]


async def test_only_public_records_are_ever_exposed(
    store: Store, engine: StepEngine, server: LiveServer, http: httpx.AsyncClient
) -> None:
    engine.hold()
    created = await http.post("/v1/casts", json={"input": TEXT, "response_format": "wav"})
    cid = created.json()["id"]
    await _private_streams(store, cid)
    seen = Seen(await deployment_secret(store))
    seen.add_response(created)
    engine.allow(1)  # only the first chunk is published
    await status_when(store, cid, lambda s: s.chunks_done == 1)

    # Phase 1: generating. Everything public about the cast, none of the rest.
    for url in (
        f"/v1/casts/{cid}",
        f"/v1/casts/{cid}/records",
        f"/v1/casts/{cid}/records?seq_num=0&max_records=1000",
        f"/c/{cid}",
    ):
        response = await http.get(url)
        assert response.status_code == 200, url
        seen.add_response(response)
    await _stream_for_a_while(http, f"/v1/casts/{cid}/events", seen)
    await _stream_for_a_while(http, f"/v1/casts/{cid}/audio", seen)
    assert '["t","Public opening"]' in seen.everything  # the caption of chunk 0

    statuses = {}
    for target in _targets(cid):
        response = await raw_get(server.port, target)
        statuses[target] = response.status
        seen.add_response(response)
    seen.assert_private(spoken=False)
    assert all(status in (400, 404) for status in statuses.values()), statuses

    # Phase 2: the second chunk is published; its caption may now be read, nothing else.
    engine.run_free()
    await status_when(store, cid, lambda s: s.state == CastState.DONE)
    for url in (f"/v1/casts/{cid}", f"/v1/casts/{cid}/records", f"/v1/casts/{cid}/events"):
        seen.add_response(await http.get(url))
    for target in _targets(cid):
        response = await raw_get(server.port, target)
        assert response.status in (400, 404), target  # answered, not just rate limited
        seen.add_response(response)
    seen.assert_private(spoken=True)


async def test_status_and_meta_never_hold_the_text(
    engine: StepEngine, http: httpx.AsyncClient
) -> None:
    engine.hold()
    cid = await submit(http, TEXT)
    view = (await http.get(f"/v1/casts/{cid}")).text
    meta = (await http.get(f"/v1/casts/{cid}/records?max_records=1")).json()["records"][0]
    assert UNSPOKEN not in view
    assert UNSPOKEN not in base64.b64decode(meta["body"]).decode()
    assert "Public opening words." in view  # the title, derived from the opening


@pytest.mark.parametrize("path", ["", "/records", "/events", "/audio"])
async def test_unknown_and_malformed_ids_are_not_found(server: LiveServer, path: str) -> None:
    for cid in ("AAAAAAAAAAAAAAAAAAAAAA", "short", "x" * 300, "has.dot.in.it.22chars_", "jobs"):
        response = await raw_get(server.port, f"/v1/casts/{cid}{path}")
        assert response.status == 404, (cid, path)
        assert b"cast_not_found" in response.body
        assert b"x" * 300 not in response.body  # a bad id is not echoed back
