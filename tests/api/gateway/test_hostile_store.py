"""Store trouble is a 503, not a traceback (issue 14): a store that fails under a request is
OpenAI's 503 `store_unavailable` with `Retry-After` before the answer starts, an in-band error
(SSE) or an incomplete body (audio) after, and one log line either way, naming no cast."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import httpx
import pytest

from harness.forwarding import ForwardingStore
from speechd.api.app import create_app
from speechd.casts import CastState
from speechd.config import Settings
from speechd.durable import (
    AppendAck,
    AppendRecord,
    DurableError,
    ReadBatch,
    Spare,
    Store,
    StreamInfo,
)
from speechd.worker import Worker
from tests.api.gateway._support import (
    LiveServer,
    StepEngine,
    live_server,
    sse_events,
    status_when,
    submit,
)

TEXT = " ".join(f"word{n}" for n in range(30))


class FlakyStore(ForwardingStore):
    """The api's view of a store that can be made to fail: while `broken`, every operation
    raises `DurableError` naming the stream (as real backends' errors do)."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.broken = False

    def _check(self, stream: str) -> None:
        if self.broken:
            raise DurableError(f"reading {stream} failed: the disk went away")

    async def append(
        self, stream: str, records: Sequence[AppendRecord], *, match_seq_num: int | None = None
    ) -> AppendAck:
        self._check(stream)
        return await super().append(stream, records, match_seq_num=match_seq_num)

    async def read(self, stream: str, seq_num: int = 0, **options: Any) -> ReadBatch:
        self._check(stream)
        return await super().read(stream, seq_num, **options)

    async def check_tail(self, stream: str) -> int:
        self._check(stream)
        return await super().check_tail(stream)

    async def trim(self, stream: str, before_seq: int) -> int:
        self._check(stream)
        return await super().trim(stream, before_seq)

    async def list(self, prefix: str = "", *, limit: int = 1000) -> list[StreamInfo]:
        self._check(prefix)
        return await super().list(prefix, limit=limit)

    async def delete(self, stream: str) -> bool:
        self._check(stream)
        return await super().delete(stream)

    async def sweep(
        self, max_age_s: float, prefixes: Sequence[str], *, spare: Spare | None = None
    ) -> int:
        self._check("sweep")
        return await super().sweep(max_age_s, prefixes, spare=spare)

    async def close(self) -> None:
        pass  # the test owns the inner store


@pytest.fixture
async def flaky(store: Store, worker: Worker) -> AsyncIterator[tuple[LiveServer, FlakyStore]]:
    """The app on a store that can fail (the worker keeps the real one)."""
    api_store = FlakyStore(store)
    app = create_app(Settings(data_dir="unused"), store=api_store)
    async with live_server(app) as live:
        yield live, api_store


@contextlib.contextmanager
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[list[logging.LogRecord]]:
    """speechd's and uvicorn's log records meanwhile (uvicorn's do not reach the root)."""
    found: list[logging.LogRecord] = []
    uvicorn = logging.getLogger("uvicorn")
    uvicorn.addHandler(caplog.handler)
    caplog.clear()
    try:
        with caplog.at_level(logging.INFO):
            yield found
    finally:
        uvicorn.removeHandler(caplog.handler)
        # The server's records (the test's own httpx client logs its requests too).
        found.extend(r for r in caplog.records if r.name.startswith(("speechd", "uvicorn")))


def assert_one_line_each(records: list[logging.LogRecord], count: int, *cast_ids: str) -> None:
    trouble = [r for r in records if "store unavailable" in r.getMessage()]
    assert len(trouble) == count, [r.getMessage() for r in records]
    for record in records:
        assert record.exc_info is None, record.getMessage()
        assert "Traceback" not in record.getMessage()
        for cast_id in cast_ids:
            assert cast_id not in record.getMessage()


def assert_store_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"] == "1"
    assert response.json() == {
        "error": {
            "message": "The cast store is unavailable; try again shortly.",
            "type": "server_error",
            "param": None,
            "code": "store_unavailable",
        }
    }


async def test_before_the_answer_starts_store_trouble_is_a_503(
    store: Store,
    flaky: tuple[LiveServer, FlakyStore],
    caplog: pytest.LogCaptureFixture,
) -> None:
    live, api_store = flaky
    async with httpx.AsyncClient(base_url=live.url, timeout=30) as http:
        cast_id = await submit(http, "A cast made while the store was fine.")
        await status_when(store, cast_id, lambda s: s.state == CastState.DONE)
        api_store.broken = True
        requests = [
            ("POST", "/v1/audio/speech", {"input": "Hello."}),
            ("POST", "/v1/casts", {"input": "Hello."}),
            ("GET", f"/v1/casts/{cast_id}", None),
            ("GET", f"/v1/casts/{cast_id}/records?wait=1", None),
            ("GET", f"/v1/casts/{cast_id}/events", None),
            ("GET", f"/v1/casts/{cast_id}/audio", None),
            ("GET", "/metrics", None),
        ]  # (/readyz answers from the ready workers it read within the last second)
        with logs(caplog) as records:
            for method, path, body in requests:
                assert_store_unavailable(await http.request(method, path, json=body))
        assert_one_line_each(records, len(requests), cast_id)
        player = await http.get(f"/c/{cast_id}")
        assert player.status_code == 503
        api_store.broken = False
        assert (await http.get(f"/v1/casts/{cast_id}")).status_code == 200
        assert (await http.get("/healthz")).status_code == 200


async def test_mid_stream_speech_events_end_with_an_in_band_error(
    engine: StepEngine, flaky: tuple[LiveServer, FlakyStore], caplog: pytest.LogCaptureFixture
) -> None:
    live, api_store = flaky
    engine.hold()
    engine.allow(1)
    body = {"input": TEXT, "stream_format": "sse", "response_format": "pcm"}
    async with httpx.AsyncClient(base_url=live.url, timeout=30) as http:
        with logs(caplog) as records:
            async with http.stream("POST", "/v1/audio/speech", json=body) as response:
                assert response.status_code == 200
                text = ""
                async for data in response.aiter_text():
                    text += data
                    if "speech.audio.delta" in text and not api_store.broken:
                        api_store.broken = True
                        engine.run_free()
        events = [e for e in sse_events(text) if "data" in e]
        last = httpx.Response(200, content=events[-1]["data"]).json()
        assert last["type"] == "error"
        assert last["error"]["code"] == "store_unavailable"
        assert_one_line_each(records, 1)


async def test_mid_stream_audio_ends_incomplete_with_one_line(
    engine: StepEngine, flaky: tuple[LiveServer, FlakyStore], caplog: pytest.LogCaptureFixture
) -> None:
    live, api_store = flaky
    engine.hold()
    engine.allow(1)
    async with httpx.AsyncClient(base_url=live.url, timeout=30) as http:
        with logs(caplog) as records, pytest.raises(httpx.RemoteProtocolError):
            async with http.stream(
                "POST", "/v1/audio/speech", json={"input": TEXT, "response_format": "pcm"}
            ) as response:
                assert response.status_code == 200
                async for _ in response.aiter_bytes():
                    api_store.broken = True
                    engine.run_free()
        assert_one_line_each(records, 1)
        # uvicorn's own note that the body ended early: one line, no trace.
        assert any("without completing response" in r.getMessage() for r in records)


async def test_mid_stream_public_reads_end_in_band_or_incomplete(
    store: Store,
    engine: StepEngine,
    flaky: tuple[LiveServer, FlakyStore],
    caplog: pytest.LogCaptureFixture,
) -> None:
    live, api_store = flaky
    engine.hold()
    async with httpx.AsyncClient(base_url=live.url, timeout=30) as http:
        cast_id = await submit(http, TEXT, response_format="pcm")
        engine.allow(1)
        await status_when(store, cast_id, lambda s: s.chunks_done == 1)
        with logs(caplog) as records:
            # SSE: the stream ends with an abort event, reason `unavailable`.
            async with http.stream("GET", f"/v1/casts/{cast_id}/events") as response:
                text = ""
                async for data in response.aiter_text():
                    text += data
                    if "event: audio" in text and not api_store.broken:
                        api_store.broken = True
                        engine.allow(1)
            assert sse_events(text)[-1]["event"] == "abort"
            assert '"reason":"unavailable"' in sse_events(text)[-1]["data"]
            assert "disk went away" not in text  # the store's own words stay in the log
            api_store.broken = False
            # Live audio: the body ends incomplete.
            with pytest.raises(httpx.RemoteProtocolError):
                async with http.stream("GET", f"/v1/casts/{cast_id}/audio") as response:
                    async for _ in response.aiter_bytes():
                        api_store.broken = True
                        engine.allow(1)
        assert_one_line_each(records, 2, cast_id)
        api_store.broken = False
        engine.run_free()
