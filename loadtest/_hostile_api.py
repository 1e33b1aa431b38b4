"""The api part of bench_hostile: how long the api takes to answer pathological requests.

    python -m loadtest._hostile_api [--server URL] [--repeats N]

Target (issue 14): the api answers every pathological request in <= 100 ms. Each kind below
is sent `repeats` times in a row; the figures per kind are the latency p50 and max (request
sent -> whole answer read), the statuses seen, the ratio of the p50 against `GET /healthz`'s
p50 measured in the same run (the baseline), and the slowest `GET /healthz` answered *while*
that kind ran (a poller on its own connection every 20 ms): a request that held the event
loop would show there. The load average is printed before and after.

Without `--server` it starts its own api (`python -m speechd api`) on a fresh data folder, and
beside it the real worker process on the engine test double (harness/engines.py; the
api's answers do not depend on the model, and the double keeps the worker's CPU off the
measurement), and also runs the kinds that make a cast (`ACCEPTED`). Given a server (as
bench_hostile passes the one it measures the planner on), it sends only kinds that create
nothing, so no hostile cast lands on that server's worker.

`hostile_requests()` is also what `tests/api/gateway/test_hostile_bounds.py` sends, to check
that each answer is a 2xx or an OpenAI-shaped 4xx and /healthz keeps answering.

`run(server_url, repeats=N)` returns the figures and prints the section (bench_hostile calls
it); it never asserts on speed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import httpx

__all__ = [
    "ACCEPTED",
    "HOSTILE_TEXT",
    "Hostile",
    "KindFigures",
    "hostile_requests",
    "main",
    "report",
    "run",
]

TARGET_MS = 100.0

HOSTILE_TEXT = ("[" * 1000 + "1-" * 1000 + "a@" * 1000 + "(" * 500 + "." * 500)[:6000]
"""Runs of the characters the normaliser's patterns handle (issue 14's adversarial text)."""

ACCEPTED = "casts-200k-hostile-text"
"""The one kind that makes a cast (then finds it again: identical requests share it)."""


@dataclass(frozen=True)
class Hostile:
    """One pathological request. `{cast}` in `path` is a finished cast's id; `expect` the
    statuses a correct api answers with (any 2xx or 4xx is acceptable; these are the
    specific ones)."""

    kind: str
    method: str
    path: str
    body: bytes | None = None
    headers: tuple[tuple[str, str], ...] = ()
    expect: tuple[int, ...] = (400,)


def _json(value: object) -> bytes:
    return json.dumps(value).encode()


_JSON = (("content-type", "application/json"),)


def hostile_requests(*, accepting: bool = True) -> list[Hostile]:
    """The pathological requests, one per kind; `accepting`: include the kind that makes a
    cast (`ACCEPTED`)."""
    voice_20k = "a(" + "1" * 20000
    kinds = [
        Hostile(
            "casts-voice-20k",
            "POST",
            "/v1/casts",
            _json({"input": "Hello there.", "voice": voice_20k}),
            _JSON,
        ),
        Hostile(
            "speech-voice-20k",
            "POST",
            "/v1/audio/speech",
            _json({"input": "Hello there.", "voice": voice_20k}),
            _JSON,
        ),
        Hostile(
            "speech-voice-object-100k",
            "POST",
            "/v1/audio/speech",
            _json({"input": "Hello there.", "voice": {"id": "a(" * 50000}}),
            _JSON,
        ),
        Hostile(
            "casts-blend-9-voices",
            "POST",
            "/v1/casts",
            _json({"input": "Hello there.", "voice": "+".join(["af_heart(1)"] * 9)}),
            _JSON,
        ),
        Hostile(
            "casts-blend-256-plus",
            "POST",
            "/v1/casts",
            _json({"input": "Hello there.", "voice": "+" * 256}),
            _JSON,
        ),
        Hostile(
            "casts-json-nested-1m",
            "POST",
            "/v1/casts",
            b'{"input": "hi", "x": ' + b"[" * 1_000_000 + b"]" * 1_000_000 + b"}",
            _JSON,
        ),
        Hostile(
            "casts-json-100k-keys",
            "POST",
            "/v1/casts",
            _json({f"k{i}": i for i in range(100_000)}),
            _JSON,
        ),
        Hostile(
            "casts-json-800k-objects",  # 800,000 dicts, were it decoded to Python first
            "POST",
            "/v1/casts",
            b'{"x": [' + b"{}," * 800_000 + b'{}], "input": 5}',
            _JSON,
        ),
        Hostile(
            "casts-200k-text-bad-last-char",
            "POST",
            "/v1/casts",
            _json({"input": (HOSTILE_TEXT * 34)[:199_999] + "\x07"}),
            _JSON,
        ),
        Hostile(
            "casts-200k-escaped-surrogates",
            "POST",
            "/v1/casts",
            b'{"input": "' + b"\\ud83d\\ude00" * 199_999 + b'\\ud800"}',
            _JSON,
        ),
        Hostile(
            "casts-over-body-limit",
            "POST",
            "/v1/casts",
            _json({"input": "x" * 3_000_000}),
            _JSON,
            expect=(413,),
        ),
        Hostile(
            "speech-controls-4096",
            "POST",
            "/v1/audio/speech",
            _json({"input": "\x01" * 4096}),
            _JSON,
        ),
        Hostile(
            "speech-combining-4097",
            "POST",
            "/v1/audio/speech",
            _json({"input": "a" + "\u0301" * 4096}),
            _JSON,
        ),
        # SSML (issue 29): refused whole, before any work; reading is linear.
        *ssml_requests(),
        # Public reads (a server with the default read quota may answer some with 429).
        Hostile(
            "records-seq-num-5000-digits",
            "GET",
            "/v1/casts/{cast}/records?seq_num=" + "9" * 5000,
            expect=(400, 429),
        ),
        Hostile(
            "events-last-event-id-5000",
            "GET",
            "/v1/casts/{cast}/events",
            headers=(("last-event-id", "9" * 5000),),
            expect=(400, 429),
        ),
        Hostile(
            "audio-range-8k",
            "GET",
            "/v1/casts/{cast}/audio",
            headers=(("range", "bytes=" + ",".join(["0-1"] * 2000)),),
            expect=(200, 429),
        ),
        Hostile(
            "audio-if-none-match-8k",
            "GET",
            "/v1/casts/{cast}/audio",
            headers=(("if-none-match", ", ".join(['"x"'] * 1500)),),
            expect=(200, 429),
        ),
        Hostile("cast-id-8k", "GET", "/v1/casts/" + "A" * 8000, expect=(404, 429)),
        Hostile("model-id-8k", "GET", "/v1/models/" + "m" * 8000, expect=(404,)),
        Hostile(
            "x-forwarded-for-1000",
            "GET",
            "/v1/casts/{cast}",
            headers=(("x-forwarded-for", ", ".join(["203.0.113.9"] * 1000)),),
            expect=(200, 429),
        ),
        Hostile("method-nonsense", "BREW", "/healthz", expect=(405,)),
    ]
    if accepting:
        kinds.append(
            Hostile(
                ACCEPTED,
                "POST",
                "/v1/casts",
                _json({"input": (HOSTILE_TEXT * 34)[:200_000]}),
                _JSON,
                expect=(200, 201),
            )
        )
    return kinds


def ssml_requests() -> list[Hostile]:
    """The SSML kinds: 10,000-deep nesting, 200,000 characters of tags, a huge attribute, a
    DTD with nested entities (billion laughs), 200,000 characters whose one bad entity is the
    last, each refused with a 400 on `input`."""
    laughs = (
        '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
        + "".join(f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10 if i > 1 else "&lol;" * 10}">'
                  for i in range(1, 10))
        + "]><speak>&lol9;</speak>"
    )  # fmt: skip
    tags = ("<s></s>" * 28_572)[:199_990]
    return [
        Hostile("casts-ssml-nested-10k", "POST", "/v1/casts",
                _json({"input": "<speak>" + "<s>" * 10_000}), _JSON),
        Hostile("casts-ssml-200k-tags", "POST", "/v1/casts",
                _json({"input": f"<speak>{tags}</speak>"}), _JSON),
        Hostile("casts-ssml-200k-attribute", "POST", "/v1/casts",
                _json({"input": '<speak><s a="' + "x" * 199_970 + '">x</s></speak>'}), _JSON),
        Hostile("casts-ssml-200k-bad-entity-last", "POST", "/v1/casts",
                _json({"input": "<speak>" + "a&amp;" * 33_300 + "&lol;</speak>"}), _JSON),
        Hostile("casts-ssml-billion-laughs", "POST", "/v1/casts", _json({"input": laughs}),
                _JSON),
        Hostile("speech-ssml-nested-4096", "POST", "/v1/audio/speech",
                _json({"input": ("<speak>" + "<s>" * 1400)[:4096]}), _JSON),
    ]  # fmt: skip


# -- measuring ------------------------------------------------------------------------------


@dataclass
class KindFigures:
    kind: str
    latencies_ms: list[float]
    statuses: Counter[int]
    healthz_max_ms: float | None
    """The slowest /healthz answered while this kind ran (None: the kind ran shorter than
    one poll, so none came back meanwhile)."""
    expected: bool
    """Every answer had one of the kind's expected statuses."""

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.latencies_ms)

    @property
    def max_ms(self) -> float:
        return max(self.latencies_ms)


@dataclass
class HostileApiResult:
    baseline_ms: float
    """`GET /healthz` p50, the same run."""
    kinds: list[KindFigures]
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    skipped: list[str] = field(default_factory=list)


class _HealthWatch:
    """Polls /healthz every 20 ms on its own connection; `window()` gives the slowest answer
    since the window opened."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._worst: float | None = None
        self._thread = threading.Thread(target=self._run, name="healthz-watch", daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self._stop.is_set():
                started = time.perf_counter()
                with contextlib.suppress(httpx.HTTPError):
                    client.get(self._url + "/healthz")
                took = (time.perf_counter() - started) * 1000
                with self._lock:
                    self._worst = took if self._worst is None else max(self._worst, took)
                self._stop.wait(0.02)

    def reset(self) -> None:
        with self._lock:
            self._worst = None

    def worst_ms(self) -> float | None:
        """The slowest answer since `reset`; None if none came back in that time."""
        with self._lock:
            return self._worst

    def __enter__(self) -> _HealthWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)


def _send(client: httpx.Client, url: str, request: Hostile, cast_id: str) -> tuple[float, int]:
    path = request.path.replace("{cast}", cast_id)
    started = time.perf_counter()
    response = client.request(
        request.method, url + path, content=request.body, headers=dict(request.headers)
    )
    response.read()
    return (time.perf_counter() - started) * 1000, response.status_code


def _finished_cast(url: str) -> str:
    """A short finished cast (wav) to aim the read kinds at."""
    body = {"input": "A short cast for the hostile reads.", "response_format": "wav"}
    response = httpx.post(url + "/v1/audio/speech", json={**body, "stream": False}, timeout=300)
    response.raise_for_status()
    return response.headers["x-cast-id"]


def measure(url: str, *, repeats: int = 20, accepting: bool = False) -> HostileApiResult:
    """Send every kind `repeats` times to the api at `url` and collect the figures."""
    load_before = os.getloadavg()
    cast_id = _finished_cast(url)
    figures: list[KindFigures] = []
    with httpx.Client(timeout=60) as client, _HealthWatch(url) as watch:
        baseline = [_send(client, url, Hostile("healthz", "GET", "/healthz"), cast_id)[0]]
        baseline += [_send(client, url, Hostile("healthz", "GET", "/healthz"), cast_id)[0]
                     for _ in range(max(repeats, 20))]  # fmt: skip
        for request in hostile_requests(accepting=accepting):
            watch.reset()
            latencies: list[float] = []
            statuses: Counter[int] = Counter()
            for _ in range(repeats):
                took, status = _send(client, url, request, cast_id)
                latencies.append(took)
                statuses[status] += 1
            figures.append(
                KindFigures(
                    request.kind,
                    latencies,
                    statuses,
                    watch.worst_ms(),
                    all(s in request.expect for s in statuses),
                )
            )
    skipped = [] if accepting else [ACCEPTED + " (it would make a cast on that server)"]
    return HostileApiResult(
        statistics.median(baseline), figures, load_before, os.getloadavg(), skipped
    )


def report(result: HostileApiResult, out: TextIO = sys.stdout) -> None:
    """Print the section: per kind p50/max, the ratio to the baseline, statuses, and the
    slowest /healthz while the kind ran; then whether every kind met the 100 ms target."""
    lb, la = result.load_before, result.load_after
    print("api: pathological requests (target: every answer <= 100 ms)", file=out)
    print(f"  load average before {lb[0]:.2f} {lb[1]:.2f} {lb[2]:.2f}", file=out)
    print(f"  baseline GET /healthz p50 {result.baseline_ms:.1f} ms", file=out)
    print(
        f"  {'kind':<32} {'p50 ms':>8} {'max ms':>8} {'p50/base':>9} {'healthz max':>12}  statuses",
        file=out,
    )
    over = []
    for kind in result.kinds:
        statuses = " ".join(f"{s}x{n}" for s, n in sorted(kind.statuses.items()))
        mark = "" if kind.expected else "  (unexpected status)"
        health = "-" if kind.healthz_max_ms is None else f"{kind.healthz_max_ms:.1f} ms"
        print(
            f"  {kind.kind:<32} {kind.p50_ms:8.1f} {kind.max_ms:8.1f} "
            f"{kind.p50_ms / result.baseline_ms:8.1f}x {health:>12}  {statuses}{mark}",
            file=out,
        )
        if kind.max_ms > TARGET_MS:
            over.append(kind.kind)
    for skipped in result.skipped:
        print(f"  skipped: {skipped}", file=out)
    print(f"  load average after  {la[0]:.2f} {la[1]:.2f} {la[2]:.2f}", file=out)
    verdict = "met" if not over else "NOT met by " + ", ".join(over)
    print(f"  target <= {TARGET_MS:.0f} ms (max of every kind): {verdict}", file=out)


# -- a server of its own --------------------------------------------------------------------


@contextlib.contextmanager
def _own_server() -> Iterator[str]:
    """`speechd api` on a fresh data folder (read quota out of the way), with the real worker
    on the engine double beside it; the double makes no audio for the accepted hostile text
    (`silent`), so the worker stays idle while the api is measured."""
    from harness.servers import start_server
    from harness.workers import worker_process

    accepted = next(r for r in hostile_requests() if r.kind == ACCEPTED)
    text = json.loads(accepted.body or b"{}")["input"]
    with tempfile.TemporaryDirectory(prefix="hostile-api-") as folder:
        data = Path(folder) / "data"
        # A read quota that never binds here: each read kind's own path is what is timed.
        quota = ["--read-rate", "1000000", "--read-burst", "1000000"]
        args = ["api", "--data-dir", str(data), "--log-level", "warning", *quota]
        with (
            worker_process(data, silent=text),  # type: ignore[arg-type]
            start_server(args) as live,
        ):
            yield live.url


def run(
    server_url: str | None = None, *, repeats: int = 20, out: TextIO = sys.stdout
) -> HostileApiResult:
    """Measure and print. `server_url`: a running speechd (only kinds that make no cast are
    sent); None: start one of its own (every kind)."""
    if server_url is not None:
        result = measure(server_url.rstrip("/"), repeats=repeats, accepting=False)
    else:
        with _own_server() as url:
            result = measure(url, repeats=repeats, accepting=True)
    report(result, out)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest._hostile_api", description=__doc__)
    parser.add_argument("--server", help="a running speechd (default: start one)")
    parser.add_argument("--repeats", type=int, default=20, help="requests per kind (20)")
    args = parser.parse_args(argv)
    run(args.server, repeats=args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
