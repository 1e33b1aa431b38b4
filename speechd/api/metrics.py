"""Prometheus metrics of the api process (`GET /metrics`), one registry per app.

What is measured where:

* In the api, as requests run: `speechd_http_requests_total{route,method,status}`,
  `speechd_time_to_first_audio_seconds` (request received -> first audio byte ready, as a
  caller of `/v1/audio/speech` experiences it), `speechd_casts_submitted_total{outcome}`,
  `speechd_streams_open` and `speechd_streams_refused_total{cap}` (long-lived reads held now,
  and those refused by the per-client or the total cap).
* Read from the store at each scrape (at most once a second; a scrape within the second gets
  the figures of the last one), so any api replica reports the same figures:
  `speechd_queue_depth` (casts waiting in line or being made), `speechd_workers_ready`,
  `speechd_active_casts` (casts generating now) and `speechd_cast_lead_seconds`, a gauge
  histogram of how far each one's audio is ahead of real time (`_bucket{le}`, `_gcount`,
  `_gsum`), with `speechd_cast_lead_min_seconds` the cast closest to running dry; and from the
  `progress/done` receipts of finished casts `speechd_casts_completed_total`,
  `speechd_chunks_generated_total`, `speechd_audio_generated_seconds_total` and
  `speechd_generation_seconds_total`. Chunks count once their cast finishes; the counters
  restart from the store's whole history with the api.
* From the supervisor, under `speechd serve` only: `speechd_worker_restarts_total` and
  `speechd_worker_alive`.
* Measured by each ready worker and read from its latest notice at each scrape
  (`speechd.telemetry` lists the families): `speechd_worker_info{worker,device,...}` names
  the device it runs on; its CPU use, RSS, audio made and, where its device has the sources,
  GPU load and memory, power, rails, temperatures, energy and joules per audio second.

Privacy and bounds: /metrics is open, as scrape endpoints usually are, and a cast id is the
capability to read a cast, so no series is per cast and no label value comes from a request:
`route` is the matched route's template (or `unmatched`), `method` one of the HTTP methods (or
`other`), `status` the answer's code.

The worker's own scheduler figures (per-chunk generation time, real-time factor, admission
decisions) live in the worker process and reach the api only through its receipts.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections.abc import Callable, Iterator
from typing import Protocol

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from speechd.casts import CastState
from speechd.errors import CastNotFound
from speechd.service import CastService
from speechd.telemetry import WorkerReadings, telemetry_families

__all__ = ["CONTENT_TYPE", "ApiMetrics", "StreamCounts", "SupervisedWorker"]

CONTENT_TYPE = CONTENT_TYPE_LATEST

_TTFA_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)
_MAX_SCANNED_CASTS = 256
_REFRESH_EVERY_S = 1.0
_LEAD_BUCKETS = (-30.0, -10.0, -5.0, -2.0, -1.0, 0.0, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)
"""Seconds of lead: below 0 a listener has run dry (or will have, at the live edge)."""
_METHODS = frozenset(
    {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"}
)


class StreamCounts(Protocol):
    """What the metrics read of the server's stream caps (`speechd.limits.StreamSlots`, which
    another door may share under `speechd serve`)."""

    @property
    def in_use(self) -> int: ...

    @property
    def refused(self) -> dict[str, int]: ...


class SupervisedWorker(Protocol):
    """What the api sees of the worker supervisor it runs under `speechd serve`."""

    @property
    def restarts(self) -> int: ...

    @property
    def alive(self) -> bool: ...


class _SupervisorCollector(Collector):
    def __init__(self, supervisor: SupervisedWorker) -> None:
        self._supervisor = supervisor

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(
            "speechd_worker_restarts",
            "Times the supervisor restarted the worker process.",
            value=self._supervisor.restarts,
        )
        yield GaugeMetricFamily(
            "speechd_worker_alive",
            "1 while the supervised worker process runs.",
            value=1 if self._supervisor.alive else 0,
        )


class _TelemetryCollector(Collector):
    """The ready workers' readings as of the last refresh."""

    def __init__(self) -> None:
        self.workers: list[WorkerReadings] = []

    def collect(self) -> Iterator[Metric]:
        yield from telemetry_families(self.workers)


async def _worker_readings(service: CastService) -> list[WorkerReadings]:
    """Each ready worker's device and, from its latest notice, its readings."""
    found = []
    for ready in await service.workers():
        latest = await service.latest_notice(ready.worker) or ready
        found.append(
            WorkerReadings(
                worker=ready.worker,
                device=latest.device or ready.device,
                device_name=latest.device_name or ready.device_name,
                readings=latest.telemetry,
                state=latest.state,
                fallback=latest.fallback,
                max_batch=latest.max_batch or ready.max_batch,
                graph=latest.graph or ready.graph,
            )
        )
    return found


class _LeadCollector(Collector):
    """The leads of the casts generating at the last refresh, as one gauge histogram."""

    def __init__(self) -> None:
        self.leads: list[float] = []

    def collect(self) -> Iterator[Metric]:
        leads = sorted(self.leads)
        buckets = [(f"{le:g}", float(bisect.bisect_right(leads, le))) for le in _LEAD_BUCKETS]
        buckets.append(("+Inf", float(len(leads))))
        yield GaugeHistogramMetricFamily(
            "speechd_cast_lead_seconds",
            "Generating casts by lead: seconds of audio appended minus seconds since their "
            "first audio.",
            buckets=buckets,
            gsum_value=sum(leads),
        )
        if leads:
            yield GaugeMetricFamily(
                "speechd_cast_lead_min_seconds",
                "The smallest lead of a generating cast (the one closest to running dry).",
                value=leads[0],
            )


class _StreamCollector(Collector):
    def __init__(self, streams: StreamCounts) -> None:
        self._streams = streams

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "speechd_streams_open",
            "Long-lived reads held now (SSE, long-polls, live audio, waiting speech requests).",
            value=self._streams.in_use,
        )
        refused = CounterMetricFamily(
            "speechd_streams_refused",
            "Long-lived reads refused, by the cap that refused them (client: 429, total: 503).",
            labels=["cap"],
        )
        for cap, count in sorted(self._streams.refused.items()):
            refused.add_metric([cap], count)
        yield refused


class ApiMetrics:
    """The api's metrics. Built by `create_app`; `refresh` reads the store before a scrape."""

    def __init__(
        self,
        *,
        supervisor: SupervisedWorker | None = None,
        slots: StreamCounts | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self._requests = Counter(
            "speechd_http_requests",
            "HTTP requests by route template, method and status.",
            ["route", "method", "status"],
            registry=r,
        )
        self._ttfa = Histogram(
            "speechd_time_to_first_audio_seconds",
            "From a speech request's arrival to its first audio bytes.",
            buckets=_TTFA_BUCKETS,
            registry=r,
        )
        self._submitted = Counter(
            "speechd_casts_submitted",
            "Casts asked for (speech and POST /v1/casts) by outcome: a new cast, or one an "
            "identical request made.",
            ["outcome"],
            registry=r,
        )
        self._queue = Gauge(
            "speechd_queue_depth", "Casts waiting in line or being made.", registry=r
        )
        self._ready = Gauge(
            "speechd_workers_ready",
            "Workers with the model loaded and a fresh heartbeat.",
            registry=r,
        )
        self._active = Gauge("speechd_active_casts", "Casts generating now.", registry=r)
        self._leads = _LeadCollector()
        r.register(self._leads)
        self._completed = Counter(
            "speechd_casts_completed", "Casts finished (receipts).", registry=r
        )
        self._chunks = Counter(
            "speechd_chunks_generated", "Audio chunks of finished casts.", registry=r
        )
        self._audio_s = Counter(
            "speechd_audio_generated_seconds", "Seconds of audio of finished casts.", registry=r
        )
        self._gen_s = Counter(
            "speechd_generation_seconds",
            "Worker seconds spent generating finished casts.",
            registry=r,
        )
        if supervisor is not None:
            r.register(_SupervisorCollector(supervisor))
        self._telemetry = _TelemetryCollector()
        r.register(self._telemetry)
        if slots is not None:
            r.register(_StreamCollector(slots))
        self._receipts_next = 0
        self._clock = clock
        self._refreshed: float | None = None
        self._refreshing = asyncio.Lock()

    # -- recorded by the api as it serves -----------------------------------------------

    def request(self, route: str, method: str, status: int) -> None:
        """Count one answer. `route` must be a route template (or "unmatched"); `method` is
        whatever the client sent, kept only if it is an HTTP method."""
        method = method if method in _METHODS else "other"
        self._requests.labels(route, method, str(status)).inc()

    def first_audio(self, seconds: float) -> None:
        self._ttfa.observe(seconds)

    def submitted(self, created: bool) -> None:
        self._submitted.labels("created" if created else "existing").inc()

    # -- read from the store at scrape time ---------------------------------------------

    async def refresh(self, service: CastService) -> None:
        """Update the store-derived figures (called by `GET /metrics` before rendering); at
        most once per second, however often /metrics is asked for."""
        async with self._refreshing:
            now = self._clock()
            if self._refreshed is not None and now - self._refreshed < _REFRESH_EVERY_S:
                return
            await self._refresh(service)
            self._refreshed = self._clock()

    async def _refresh(self, service: CastService) -> None:
        self._queue.set(await service.queue_depth())
        self._ready.set(len(await service.workers()))
        active = 0
        leads: list[float] = []
        for cast_id in await service.pending_casts(limit=_MAX_SCANNED_CASTS):
            try:
                status = await service.status(cast_id)
            except CastNotFound:  # removed by retention while its job waited
                continue
            if status.state == CastState.GENERATING:
                active += 1
                if status.lead_ms is not None:
                    leads.append(status.lead_ms / 1000)
        self._active.set(active)
        self._leads.leads = leads
        await self._read_receipts(service)
        self._telemetry.workers = await _worker_readings(service)

    async def _read_receipts(self, service: CastService) -> None:
        while True:
            # Past a trim of the worker's window, from the first receipt kept: the counters
            # count the receipts this process saw.
            receipts, self._receipts_next = await service.receipts(self._receipts_next)
            if not receipts:
                return
            for receipt in receipts:
                self._completed.inc()
                self._chunks.inc(receipt.chunks)
                self._audio_s.inc(receipt.audio_ms / 1000)
                self._gen_s.inc(receipt.gen_ms / 1000)

    def render(self) -> bytes:
        return generate_latest(self.registry)
