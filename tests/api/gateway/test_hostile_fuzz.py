"""A fuzz suite over the HTTP api (issue 14): Hypothesis sends random JSON bodies, unicode
with controls, lone surrogates and combining marks, random voices, speeds, formats, ids,
query values and ranges, and live casts' creations and input pieces (with their token, none,
another or any header). Every answer is a 2xx or an OpenAI-shaped 4xx (the HTML pages'
own 404 aside), never a 5xx or a hang, and the server is healthy afterwards.

The server (the real app, store and worker, the engine double free-running) runs on a thread
of its own for the whole module, so the examples are plain synchronous requests. Example
counts are bounded for CI: `SPEECHD_FUZZ_EXAMPLES` (default 25) per test.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from speechd.audio import FORMATS
from speechd.config import Settings
from speechd.durable import Store
from speechd.engine import DEFAULT_VOICE_MAP
from tests.api.gateway._support import StepEngine, running_worker, serve
from tests.support.threaded import ThreadedServer

EXAMPLES = int(os.environ.get("SPEECHD_FUZZ_EXAMPLES", "25"))
TIMEOUT_S = 20.0  # far above any answer here; a hang fails the example
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
INSTALLED = ["af_heart", "am_adam"]
_OPEN: dict[str, Any] = {
    "data_dir": "unused",
    "max_queue": 1000,
    "read_rate": 1e6,
    "read_burst": 10**6,
}


# -- the server, on its own thread -----------------------------------------------------------


class _Blending(StepEngine):
    """The engine double, planning a blend the api accepted as the real engine does (the
    double has no voice tensors to mix, so by its first voice) instead of refusing it: a
    blend that reached the worker is no reason for the cast to fail."""

    def plan(self, text: str, voice: str, policy: Any) -> Any:
        return super().plan(text, _first_voice(voice), policy)

    def planner(self, voice: str, policy: Any, **options: Any) -> Any:
        return super().planner(_first_voice(voice), policy, **options)


def _first_voice(voice: str) -> str:
    return voice.split("+", 1)[0].split("(", 1)[0]


class _Server(ThreadedServer):
    name = "fuzz server"

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        self.cast_id = ""

    async def _serve(self, store: Store) -> None:
        async with (
            running_worker(store, _Blending()),
            # A read quota that never binds, so the examples reach the routes' own code.
            serve(store, Settings(**_OPEN)) as live,
        ):
            self.url = live.url
            async with httpx.AsyncClient(base_url=live.url, timeout=TIMEOUT_S) as http:
                done = await http.post(
                    "/v1/audio/speech",
                    json={"input": "A cast to aim the fuzzed reads at.", "stream": False},
                )
                self.cast_id = done.headers["x-cast-id"]
            await self._serving()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Server]:
    live = _Server(tmp_path_factory.mktemp("fuzz") / "data").start()
    yield live
    live.stop()


@pytest.fixture(scope="module")
def client(server: _Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
        yield http


def check(response: httpx.Response, *, html_404: bool = False) -> None:
    """A 2xx, or a 4xx in OpenAI's shape; never a 5xx."""
    status = response.status_code
    event(f"status {status}")  # --hypothesis-show-statistics shows the mix
    assert status < 500, (status, response.text[:500])
    if status < 400 or status == 304:
        return
    if (
        html_404
        and status == 404
        and not response.headers["content-type"].startswith("application/json")
    ):
        return
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    # A live cast's input conflict (409) names the input's `seq` too, as documented.
    shape = {"message", "type", "param", "code"}
    assert shape <= set(error) <= shape | ({"seq"} if status == 409 else set()), error
    assert isinstance(error["message"], str) and error["message"]
    assert error["param"] is None or isinstance(error["param"], str)
    assert error["code"] is None or isinstance(error["code"], str)
    assert "Traceback" not in error["message"]


def send(
    client: httpx.Client, method: str, path: str, *, headers: dict[str, str] | None = None,
    content: bytes | None = None, limit: int = 4 * 1024 * 1024,
) -> httpx.Response:  # fmt: skip
    """The answer, read to its end (or `limit` bytes of a long stream)."""
    with client.stream(method, path, headers=headers, content=content) as response:
        read = 0
        chunks = []
        for chunk in response.iter_bytes():
            chunks.append(chunk)
            read += len(chunk)
            if read >= limit:
                break
        return httpx.Response(
            response.status_code, headers=response.headers, content=b"".join(chunks)
        )


# -- strategies ------------------------------------------------------------------------------

# Any unicode, controls, lone surrogates and combining marks made likely.
_awkward = st.sampled_from(
    ["\x00", "\x07", "\x1b", "\x7f", "\x85", "\u0301", "\u0327", "\u200b", "\u202e",
     "\ufeff", "\ud800", "\udfff", "\U0001f600", "\n", "\t", " ", "[", "@", "-", "("]
)  # fmt: skip
texts = st.text(alphabet=st.one_of(st.characters(codec=None), _awkward), min_size=0, max_size=300)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)
names = INSTALLED + list(DEFAULT_VOICE_MAP)
blends = st.lists(
    st.tuples(st.sampled_from(names), st.one_of(st.none(), st.floats(-1, 100), texts)),
    min_size=1,
    max_size=10,
).map(lambda terms: "+".join(n if w is None else f"{n}({w})" for n, w in terms))
voices = st.one_of(
    st.sampled_from(names),
    blends,
    texts,
    st.builds(lambda n: "a(" + "1" * n, st.integers(0, 20000)),
    st.builds(lambda v: {"id": v}, st.one_of(st.sampled_from(names), texts)),
    json_values,
)
speeds = st.one_of(st.floats(0.25, 4.0), st.floats(allow_nan=False), st.integers(), texts)
formats = st.one_of(st.sampled_from(FORMATS), texts, json_values)
inputs = st.one_of(
    texts.filter(lambda t: t.strip()),
    texts,
    st.builds(lambda c, n: c * n, _awkward, st.integers(0, 5000)),
    json_values,
)


def speech_bodies() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"input": inputs},
        optional={
            "voice": voices,
            "model": st.one_of(st.sampled_from(["tts-1", "kokoro", "gpt-4o-mini-tts"]), texts),
            "speed": speeds,
            "response_format": formats,
            "stream_format": st.one_of(st.sampled_from(["audio", "sse"]), texts),
            "stream": st.one_of(st.booleans(), json_values),
            "instructions": st.one_of(texts, json_values),
            "title": st.one_of(texts, json_values),
            "extra": json_values,
        },
    )


# Bodies a careful client could send: the text is any printable unicode (combining marks,
# emoji, right-to-left, no controls), the rest valid or nearly so. Most make a cast.
_spoken = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Co", "Cn")), min_size=1, max_size=120
).filter(lambda t: t.strip())
plausible_speech = st.fixed_dictionaries(
    {"input": _spoken},
    optional={
        "voice": st.one_of(st.sampled_from(names), blends),
        "speed": st.floats(0.25, 4.0),
        "response_format": st.sampled_from(FORMATS),
        "stream_format": st.sampled_from(["audio", "sse"]),
        "stream": st.booleans(),
        "title": _spoken,
    },
)


def encoded(body: Any, raw: bool) -> bytes:
    """`body` as JSON: escaped ASCII (lone surrogates as \\ud800), or raw UTF-8 with them
    passed through (bytes that are not UTF-8)."""
    if not raw:
        return json.dumps(body).encode()
    return json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")


_JSON = {"content-type": "application/json"}


# -- the examples ----------------------------------------------------------------------------


@FUZZ
@given(body=st.one_of(plausible_speech, speech_bodies(), json_values), raw=st.booleans())
def test_fuzzed_speech_requests(client: httpx.Client, body: Any, raw: bool) -> None:
    check(send(client, "POST", "/v1/audio/speech", content=encoded(body, raw), headers=_JSON))


@FUZZ
@given(body=st.one_of(plausible_speech, speech_bodies(), json_values), raw=st.booleans())
def test_fuzzed_cast_submissions(client: httpx.Client, body: Any, raw: bool) -> None:
    check(send(client, "POST", "/v1/casts", content=encoded(body, raw), headers=_JSON))


def _header_text_any() -> st.SearchStrategy[str]:
    """What a client can put in a header (as `_header_text` below)."""
    return st.text(
        alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=300
    ).map(str.strip)


def live_bodies() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"live": st.one_of(st.just(True), json_values)},
        optional={
            "input": inputs,
            "voice": voices,
            "model": st.one_of(st.sampled_from(["tts-1", "kokoro"]), texts),
            "speed": speeds,
            "response_format": formats,
            "title": st.one_of(texts, json_values),
        },
    )


input_bodies = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "text": inputs,
            "done": st.one_of(st.booleans(), json_values),
            "seq": st.one_of(st.integers(-5, 10), st.integers(), json_values),
            "extra": json_values,
        },
    ),
    json_values,
)


def _close_live(client: httpx.Client, made: httpx.Response) -> None:
    """End a live cast an example made (its input done), so none waits for its timeout."""
    if made.status_code == 201 and "input_token" in made.json():
        cast = made.json()
        auth = {"authorization": f"Bearer {cast['input_token']}"}
        closed = client.post(cast["input_url"], json={"done": True}, headers=auth)
        assert closed.status_code in (200, 409), closed.text


@FUZZ
@given(body=live_bodies(), raw=st.booleans())
def test_fuzzed_live_cast_submissions(client: httpx.Client, body: Any, raw: bool) -> None:
    made = send(client, "POST", "/v1/casts", content=encoded(body, raw), headers=_JSON)
    check(made)
    _close_live(client, made)


@FUZZ
@given(
    body=input_bodies,
    raw=st.booleans(),
    auth=st.one_of(st.sampled_from(["token", "token", "none", "other"]), _header_text_any()),
)
def test_fuzzed_live_input(client: httpx.Client, body: Any, raw: bool, auth: str) -> None:
    made = client.post("/v1/casts", json={"live": True, "input": "A live cast to aim at. "})
    assert made.status_code == 201, made.text
    cast = made.json()
    headers = dict(_JSON)
    if auth == "token":
        headers["authorization"] = f"Bearer {cast['input_token']}"
    elif auth == "other":
        headers["authorization"] = "Bearer " + "x" * 43
    elif auth != "none":
        headers["authorization"] = auth
    check(send(client, "POST", cast["input_url"], content=encoded(body, raw), headers=headers))
    _close_live(client, made)


# What a client can put in a header: printable ASCII, no space at either end.
_header_text = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=200
).map(str.strip)
_query = st.one_of(st.integers(), st.floats(), _header_text)


@FUZZ
@given(
    cast_id=st.one_of(texts.filter(bool), st.just("AAAAAAAAAAAAAAAAAAAAAA"), st.just("real")),
    tail=st.sampled_from(
        ["", "/records", "/events", "/audio", "/captions.vtt", "/captions.srt", "/words", "/x"]
    ),
    query=st.dictionaries(
        st.sampled_from(["seq_num", "wait", "max_records", "x"]), _query, max_size=3
    ),
    headers=st.dictionaries(
        st.sampled_from(["range", "if-none-match", "if-range", "last-event-id", "x-forwarded-for"]),
        _header_text,
        max_size=3,
    ),
)
def test_fuzzed_public_reads(
    client: httpx.Client,
    server: _Server,
    cast_id: str,
    tail: str,
    query: dict[str, Any],
    headers: dict[str, str],
) -> None:
    cast = server.cast_id if cast_id == "real" else quote(cast_id, safe="", errors="surrogatepass")
    if "wait" in query:  # a long-poll at the tail may wait its whole (capped) time
        query["wait"] = min(abs(float(query["wait"])), 0.2) if _number(query["wait"]) else 0
    params = "&".join(f"{k}={quote(str(v), safe='')}" for k, v in query.items())
    path = f"/v1/casts/{cast}{tail}" + (f"?{params}" if params else "")
    check(send(client, "GET", path, headers=headers))
    check(send(client, "GET", f"/c/{cast}"), html_404=True)


def _number(value: Any) -> bool:
    try:
        return abs(float(value)) < float("inf")
    except ValueError:
        return False


@FUZZ
@given(
    first=st.one_of(st.none(), st.integers(-5, 10**6)),
    last=st.one_of(st.none(), st.integers(-5, 10**6)),
    unit=st.sampled_from(["bytes", "bytes", "items", ""]),
    more=st.booleans(),
)
def test_fuzzed_byte_ranges(
    client: httpx.Client, server: _Server, first: int | None, last: int | None, unit: str,
    more: bool,
) -> None:  # fmt: skip
    spec = f"{'' if first is None else first}-{'' if last is None else last}"
    value = f"{unit}={spec}" + (f",{spec}" if more else "")
    response = send(client, "GET", f"/v1/casts/{server.cast_id}/audio", headers={"range": value})
    check(response)
    if response.status_code in (200, 206):
        assert len(response.content) == int(response.headers["content-length"])


def test_the_server_is_healthy_afterwards(client: httpx.Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    answer = client.post("/v1/audio/speech", json={"input": "Still speaking.", "stream": False})
    assert answer.status_code == 200 and answer.content
    metrics = client.get("/metrics")
    assert metrics.status_code == 200
