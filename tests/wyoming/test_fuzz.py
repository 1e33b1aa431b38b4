"""The fuzz suite drives the Wyoming port too (issue 28): Hypothesis sends random bytes, random
events (any type, any data, lengths that lie: negative, fractional, absurd), events cut off
at any byte, and sequences of plausible ones. Whatever comes, the server answers with
well-framed events only (an `error` has a message, never a traceback), never crashes, keeps
its memory, and serves the next connection; the HTTP api beside it stays healthy.

The server (the real app under uvicorn, the door sharing its stream slots, the real worker
on the engine double) runs on a thread of its own for the whole module, so the examples are
plain blocking sockets. Example counts are bounded for CI: `SPEECHD_FUZZ_EXAMPLES` (default
25) per test.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from speechd import casts
from speechd.config import Settings
from speechd.durable import Store
from speechd.service import CastService, LiveCasts
from speechd.wyoming import MAX_PART_BYTES, WyomingDoor
from tests.support.live import serve
from tests.support.threaded import ThreadedServer

EXAMPLES = int(os.environ.get("SPEECHD_FUZZ_EXAMPLES", "25"))
TIMEOUT_S = 20.0  # far above any answer here; a hang fails the example
MEMORY_SLACK_KB = 256 * 1024  # the whole module's peak RSS may grow this much at most
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class _Server(ThreadedServer):
    """The app and the Wyoming door over one store, with the worker, on a thread."""

    name = "Wyoming fuzz server"

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        self.port = 0

    async def _serve(self, store: Store) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        options = Settings(data_dir="unused", max_queue=1000, live_idle_timeout=5)
        async with serve(store, settings=options) as live:
            secret = await casts.deployment_secret(store)
            service = CastService(
                store, secret, max_queue=1000, default_voice="af_heart", voice_map={}
            )
            door = WyomingDoor(
                f"tcp://127.0.0.1:{port}",
                service=service,
                live=LiveCasts(service, secret, idle_s=5),
                slots=live.app.state.slots.slots,  # the api's table, as serve shares it
                default_voice="af_heart",
                voice_map={},
                idle_s=5,
                send_timeout_s=5,
            )
            await door.start()
            try:
                self.url, self.port = live.url, port
                await self._serving()
            finally:
                await door.close()


class _Errors(logging.Handler):
    """Every ERROR logged while the module runs (an unhandled task exception is one)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Server]:
    errors = _Errors()
    logging.getLogger().addHandler(errors)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    live = _Server(tmp_path_factory.mktemp("wyoming-fuzz") / "data").start()
    try:
        yield live
        _healthy(live)
    finally:
        live.stop()
        logging.getLogger().removeHandler(errors)
    assert not errors.records, [r.getMessage() for r in errors.records]
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown < MEMORY_SLACK_KB, f"peak RSS grew {grown} KiB"


def _exchange(server: _Server, data: bytes, *, count: bool = True) -> list[dict[str, Any]]:
    """Send `data`, close the sending side, and read every event the server answers until it
    closes: each must be well framed (a JSON header line, its data as it says)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT_S) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:  # the server may close first, on a header it refused
            pass
        answer = bytearray()
        try:
            while chunk := sock.recv(65536):
                answer += chunk
                assert len(answer) < 64 * 1024 * 1024
        except ConnectionResetError:
            pass
    events = []
    stream = bytes(answer)
    while stream:
        line, sep, stream = stream.partition(b"\n")
        assert sep, f"a partial header: {line[:200]!r}"
        header = json.loads(line)
        assert isinstance(header["type"], str)
        if header.get("data_length"):
            data, stream = stream[: header["data_length"]], stream[header["data_length"] :]
            header["data"] = json.loads(data)
        if header.get("payload_length"):
            assert len(stream) >= header["payload_length"]
            stream = stream[header["payload_length"] :]
        events.append(header)
    for answered in events:
        if count:
            event(answered["type"])  # --hypothesis-show-statistics shows the mix
        if answered["type"] == "error":
            text = answered["data"]["text"]
            assert isinstance(text, str) and text and "Traceback" not in text
    return events


def _healthy(server: _Server) -> None:
    """The next connection is served, and the HTTP api beside the door answers."""
    describe = _exchange(server, b'{"type": "describe"}\n', count=False)
    assert [e["type"] for e in describe] == ["info"]
    assert httpx.get(server.url + "/healthz", timeout=TIMEOUT_S).status_code == 200
    assert httpx.get(server.url + "/readyz", timeout=TIMEOUT_S).status_code == 200


# -- strategies ------------------------------------------------------------------------------

_awkward = st.sampled_from(
    ["\x00", "\x07", "\x1b", "\x7f", "\x85", "\u0301", "\u200b", "\u202e", "\ufeff",
     "\ud800", "\U0001f600", "\n", "\t", " ", "<", "{", "\\"]
)  # fmt: skip
texts = st.text(alphabet=st.one_of(st.characters(codec=None), _awkward), max_size=200)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)
kinds = st.one_of(
    st.sampled_from(
        ["describe", "synthesize", "synthesize-start", "synthesize-chunk", "synthesize-stop",
         "ping", "audio-chunk", "transcribe", "info", "error"]
    ),
    texts,
    json_values,
)  # fmt: skip
voices = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "name": st.one_of(st.sampled_from(["af_heart", "am_adam", "alloy", "nope"]), texts),
            "language": st.one_of(st.sampled_from(["en", "en_US", "fr", ""]), texts),
            "speaker": json_values,
        },
    ),
    json_values,
)
datas = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "text": st.one_of(texts, json_values, st.integers(0, 5000).map("a".__mul__)),
            "voice": voices,
            "text_format": st.one_of(st.sampled_from(["text", "ssml"]), json_values),
            "context": json_values,
        },
    ),
    json_values,
)  # fmt: skip
lengths = st.one_of(
    st.none(),
    st.integers(-5, 64),
    st.sampled_from([MAX_PART_BYTES, MAX_PART_BYTES + 1, 2**31, 10**18]),
    st.floats(allow_nan=False),
    texts,
    json_values,
)


@st.composite
def events(draw: st.DrawFn) -> bytes:
    """One event: its data inline or in the data part, its lengths true or lying, maybe a
    payload; raw UTF-8 or escaped."""
    header: dict[str, Any] = {"type": draw(kinds)}
    data = draw(datas)
    body = b""
    if draw(st.booleans()):
        header["data"] = data
    else:
        body = json.dumps(data).encode()
        header["data_length"] = len(body)
    if draw(st.booleans()):
        header["data_length"] = draw(lengths)
    payload = draw(st.binary(max_size=256))
    if payload or draw(st.booleans()):
        header["payload_length"] = draw(st.one_of(st.just(len(payload)), lengths))
    raw = draw(st.booleans())
    line = json.dumps(header, ensure_ascii=not raw).encode("utf-8", "surrogatepass")
    return line + b"\n" + body + payload


def plausible(kind: str, **data: Any) -> bytes:
    return json.dumps({"type": kind, "data": data}).encode() + b"\n"


_spoken = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Co", "Cn")), min_size=1, max_size=80
)
plausible_streams = st.lists(_spoken, max_size=6).map(
    lambda pieces: b"".join(
        [plausible("synthesize-start", voice={"name": "af_heart"})]
        + [plausible("synthesize-chunk", text=p) for p in pieces]
        + [plausible("synthesize", text="".join(pieces)), plausible("synthesize-stop")]
    )
)


# -- the examples ----------------------------------------------------------------------------


@FUZZ
@given(data=st.binary(max_size=2048))
def test_random_bytes(server: _Server, data: bytes) -> None:
    _exchange(server, data)
    _healthy(server)


@FUZZ
@given(sequence=st.lists(events(), min_size=1, max_size=5))
def test_random_events(server: _Server, sequence: list[bytes]) -> None:
    _exchange(server, b"".join(sequence))
    _healthy(server)


@FUZZ
@given(sequence=st.lists(events(), min_size=1, max_size=3), cut=st.integers(0, 10**6))
def test_truncated_events(server: _Server, sequence: list[bytes], cut: int) -> None:
    data = b"".join(sequence)
    _exchange(server, data[: cut % (len(data) + 1)])
    _healthy(server)


@FUZZ
@given(stream=plausible_streams, cut=st.one_of(st.none(), st.integers(0, 10**6)))
def test_plausible_streams_whole_or_cut(server: _Server, stream: bytes, cut: int | None) -> None:
    answered = _exchange(server, stream if cut is None else stream[: cut % (len(stream) + 1)])
    if cut is None:
        kinds = [e["type"] for e in answered]
        assert kinds[-1] == "synthesize-stopped", kinds
    _healthy(server)
