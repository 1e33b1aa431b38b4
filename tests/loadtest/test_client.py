"""The load generator's client against a live `speechd api` and a real worker process (the
cost-model engine in place of Kokoro): listeners hear the pcm stream, identical requests are
seen sharing one cast, refusals are counted by kind, and the server's memory is read from
/proc."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from harness.servers import LiveServer, start_server
from harness.workers import worker_process
from loadtest._client import new_client, run_scenario
from loadtest._results import ScenarioRun, summarize
from loadtest._scenarios import Request, Scenario
from loadtest._servers import Server

pytestmark = pytest.mark.slow

SAME = "Chapter one. The same words, asked for three times at once."
OTHER = "Chapter two. Different words."
SCENARIO = Scenario(
    "dedupe-3",
    "dedupe",
    (*(Request(0.0, SAME, f"same-{i}") for i in range(3)), Request(0.2, OTHER, "other")),
)


def _measure(live: LiveServer, *, ready: bool) -> ScenarioRun:
    server = Server("speechd", live.url, live.process.pid)
    if ready:
        server.wait_ready(timeout=30)

    async def body() -> ScenarioRun:
        async with new_client() as client:
            return await run_scenario(client, server, SCENARIO)

    return asyncio.run(body())


def test_identical_requests_share_one_cast_and_every_listener_hears_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with (
        start_server(["api", "--data-dir", str(data)], ready=False) as live,
        worker_process(data),
    ):
        run = _measure(live, ready=True)
    assert [x.error for x in run.listeners] == [None] * 4
    same = run.listeners[:3]
    assert len({x.cast_id for x in same}) == 1 and run.listeners[3].cast_id != same[0].cast_id
    assert all(x.audio_s > 0 and x.audio_s == same[0].audio_s for x in same)
    assert all(x.ttfa_s is not None and x.timeline for x in run.listeners)
    assert (run.casts_new, run.casts_shared) == (2, 2)
    assert run.rss_peak is not None and run.rss_peak.api_mib > 0
    # The worker process's own figures, as speechd's /metrics gave them.
    assert run.worker_metrics is not None and (run.worker_metrics.rss_mib_max or 0) > 10
    summary = summarize(run, None)
    assert summary.distinct_casts == 2
    assert summary.audio_s == pytest.approx(same[0].audio_s + run.listeners[3].audio_s)


def test_refusals_are_counted_by_kind(tmp_path: Path) -> None:
    with start_server(["api", "--data-dir", str(tmp_path / "data")], ready=False) as live:
        run = _measure(live, ready=False)  # no worker: every request is refused
    summary = summarize(run, None)
    assert sum(summary.errors.values()) == 4
    assert all(kind.startswith("http 503") for kind in summary.errors), summary.errors
    assert summary.ttfa_p50_s is None and summary.audio_s == 0
