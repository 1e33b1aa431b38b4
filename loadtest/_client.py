"""Running a scenario against a server: each request a real-time listener over httpx.

A listener starts playing at its first audio byte; `pcm` bytes are exact audio (24 kHz s16le
mono). Errors are counted by kind: `http <status> <code>` for an error response, the httpx
exception's name for a transport failure (`RemoteProtocolError`: an aborted stream), `no
audio` for a 200 with an empty body.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from typing import Any

import httpx

from ._listener import PCM_BYTES_PER_S, Listener
from ._results import ListenerResult, Rss, ScenarioRun, WorkerMetrics
from ._scenarios import Request, Scenario
from ._servers import Server
from ._workload import VOICE

__all__ = ["new_client", "run_scenario", "speak", "worker_metrics"]

_SUBMITTED = re.compile(r'^speechd_casts_submitted_total\{outcome="(\w+)"\} (\S+)$', re.M)
#: The worker's figures in speechd's /metrics (speechd.telemetry), one line per worker.
_WORKER_FIGURES = {
    name: re.compile(rf"^{name}\{{[^}}\n]*\}} (\S+)$", re.M)
    for name in (
        "speechd_worker_cpu_percent",
        "speechd_worker_resident_memory_bytes",
        "speechd_device_power_watts",
        "speechd_worker_energy_per_audio_second_joules",
        "speechd_worker_max_batch",
        "speechd_worker_batch_size_count",
        "speechd_worker_batch_size_sum",
    )
}


def new_client() -> httpx.AsyncClient:
    """One client for a whole run: enough connections for every listener at once, and no
    read timeout shorter than a long cast behind a queue."""
    return httpx.AsyncClient(
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        timeout=httpx.Timeout(10.0, read=600.0),
    )


async def speak(
    client: httpx.AsyncClient,
    url: str,
    request: Request,
    began: float,
    extra: dict[str, Any] | None = None,
) -> ListenerResult:
    """Send `request` at its time after `began` (its body with `extra` fields) and play the
    answer as it arrives."""
    await asyncio.sleep(max(0.0, began + request.at_s - time.monotonic()))
    listener = Listener(submitted=time.monotonic())
    body = {"model": "tts-1", "voice": VOICE, "input": request.text, "response_format": "pcm"}
    body.update(extra or {})
    error: str | None = None
    cast_id: str | None = None
    delay: float | None = None
    try:
        async with client.stream("POST", url + "/v1/audio/speech", json=body) as response:
            cast_id = response.headers.get("X-Cast-Id")
            with contextlib.suppress(TypeError, ValueError):
                delay = float(response.headers.get("X-Cast-Start-Delay"))  # type: ignore[arg-type]
            if response.status_code != 200:
                await response.aread()
                error = f"http {response.status_code} {_error_code(response)}".rstrip()
            else:
                async for piece in response.aiter_raw():
                    listener.receive(time.monotonic(), len(piece) / PCM_BYTES_PER_S)
                if listener.first is None:
                    error = "no audio"
    except httpx.HTTPError as exc:
        error = type(exc).__name__
    listener.end(time.monotonic(), error)
    return ListenerResult(
        label=request.label,
        text=request.text,
        at_s=request.at_s,
        ttfa_s=listener.ttfa,
        audio_s=listener.received_s,
        underruns=listener.underruns,
        gap_ms=1000 * listener.stall_s,
        ended_s=None if listener.ended is None else listener.ended - began,
        error=error,
        cast_id=cast_id,
        timeline=listener.timeline,
        start_delay_s=delay,
    )


def _error_code(response: httpx.Response) -> str:
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        return str(response.json()["error"]["code"] or "")
    return ""


async def _submitted(client: httpx.AsyncClient, server: Server) -> dict[str, int] | None:
    """speechd's casts_submitted_total by outcome ("created", "existing": an identical
    request's cast); None for a server without it."""
    try:
        response = await client.get(server.url + "/metrics")
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    return {m[1]: int(float(m[2])) for m in _SUBMITTED.finditer(response.text)}


async def _sample_rss(server: Server, peak: list[Rss], every_s: float = 0.25) -> None:
    while True:
        rss = server.rss()
        if rss is not None:
            peak[0] = Rss(
                max(peak[0].api_mib, rss.api_mib), max(peak[0].worker_mib, rss.worker_mib)
            )
        await asyncio.sleep(every_s)


async def _sample_metrics(
    client: httpx.AsyncClient, server: Server, seen: list[dict[str, float]], every_s: float = 1.0
) -> None:
    """Scrape the worker's figures from /metrics until cancelled (a server without them,
    the naive one, adds nothing)."""
    while True:
        with contextlib.suppress(httpx.HTTPError):
            response = await client.get(server.url + "/metrics")
            if response.status_code == 200:
                figures = {
                    name: sum(float(v) for v in pattern.findall(response.text))
                    for name, pattern in _WORKER_FIGURES.items()
                    if pattern.search(response.text)
                }
                if figures:
                    seen.append(figures)
        await asyncio.sleep(every_s)


def worker_metrics(seen: list[dict[str, float]]) -> WorkerMetrics | None:
    """What the samples of `_sample_metrics` come to; None without any."""
    if not seen:
        return None

    def values(name: str) -> list[float]:
        return [s[name] for s in seen if name in s]

    cpu = values("speechd_worker_cpu_percent")
    rss = values("speechd_worker_resident_memory_bytes")
    power = values("speechd_device_power_watts")
    joules = values("speechd_worker_energy_per_audio_second_joules")
    limit = values("speechd_worker_max_batch")
    steps = values("speechd_worker_batch_size_count")
    chunks = values("speechd_worker_batch_size_sum")
    ran = steps[-1] - steps[0] if len(steps) > 1 else 0.0
    made = chunks[-1] - chunks[0] if len(chunks) > 1 else 0.0
    return WorkerMetrics(
        samples=len(seen),
        cpu_percent_mean=sum(cpu) / len(cpu) if cpu else None,
        cpu_percent_max=max(cpu, default=None),
        rss_mib_max=max(rss) / 2**20 if rss else None,
        power_w_mean=sum(power) / len(power) if power else None,
        joules_per_audio_s=joules[-1] if joules else None,
        max_batch=round(limit[-1]) if limit else None,
        chunks_per_step=made / ran if ran > 0 else None,
    )


async def run_scenario(
    client: httpx.AsyncClient, server: Server, scenario: Scenario
) -> ScenarioRun:
    """Every request of `scenario` against `server`, with its memory sampled meanwhile."""
    before = await _submitted(client, server)
    peak = [Rss(0.0, 0.0)]
    seen: list[dict[str, float]] = []
    sampling = [
        asyncio.create_task(_sample_rss(server, peak)),
        asyncio.create_task(_sample_metrics(client, server, seen)),
    ]
    began = time.monotonic()
    clients = asyncio.Semaphore(scenario.pool or len(scenario.requests) or 1)

    async def one(request: Request) -> ListenerResult:
        async with clients:
            return await speak(client, server.url, request, began, server.body)

    listeners = await asyncio.gather(*(one(request) for request in scenario.requests))
    for task in sampling:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    after = await _submitted(client, server)
    ends = [x.ended_s for x in listeners if x.ended_s is not None]
    delta = (
        {k: after.get(k, 0) - before.get(k, 0) for k in ("created", "existing")}
        if before is not None and after is not None
        else None
    )
    return ScenarioRun(
        scenario=scenario.name,
        kind=scenario.kind,
        target=server.name,
        concurrency=scenario.concurrency,
        wall_s=max(ends, default=0.0),
        listeners=list(listeners),
        rss_peak=peak[0] if server.pid is not None else None,
        rss_end=server.rss(),
        casts_new=None if delta is None else delta["created"],
        casts_shared=None if delta is None else delta["existing"],
        load_avg=os.getloadavg()[0],
        worker_metrics=worker_metrics(seen),
    )
