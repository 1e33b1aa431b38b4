"""The load test reads the worker's CPU use and RSS (and device figures) from speechd's own
/metrics while a scenario runs, and prints and reports them."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.registry import Collector

from loadtest.__main__ import _telemetry
from loadtest._client import _WORKER_FIGURES, worker_metrics
from loadtest._report import _markdown, build_report
from loadtest._results import ListenerResult, Machine, Run, ScenarioRun
from speechd.telemetry import Readings, WorkerReadings, telemetry_families


def _metrics_text(readings: Readings) -> str:
    class One(Collector):
        def collect(self):  # type: ignore[no-untyped-def]
            yield from telemetry_families([WorkerReadings("w1", "cpu", "", readings)])

    registry = CollectorRegistry()
    registry.register(One())
    return generate_latest(registry).decode()


def test_the_figures_are_found_in_what_speechd_serves() -> None:
    text = _metrics_text(Readings(cpu_percent=187.5, rss_bytes=1400 << 20, power_w=9.9))
    found = {name: p.findall(text) for name, p in _WORKER_FIGURES.items()}
    assert found["speechd_worker_cpu_percent"] == ["187.5"]
    assert float(found["speechd_worker_resident_memory_bytes"][0]) == 1400 << 20
    assert found["speechd_device_power_watts"] == ["9.9"]
    assert found["speechd_worker_energy_per_audio_second_joules"] == []


def test_samples_come_to_a_mean_a_peak_and_the_last_energy_figure() -> None:
    seen = [
        {"speechd_worker_cpu_percent": 100.0, "speechd_worker_resident_memory_bytes": 1 << 30},
        {"speechd_worker_cpu_percent": 200.0, "speechd_worker_resident_memory_bytes": 2 << 30},
    ]
    m = worker_metrics(seen)
    assert m is not None
    assert (m.samples, m.cpu_percent_mean, m.cpu_percent_max, m.rss_mib_max) == (
        2, 150.0, 200.0, 2048.0
    )  # fmt: skip
    assert m.power_w_mean is None and m.joules_per_audio_s is None
    assert worker_metrics([]) is None
    line = _telemetry(m)
    assert line == "; /metrics: worker cpu 150% mean 200% max, rss 2048 MiB"


def test_the_report_has_a_section_for_them() -> None:
    m = worker_metrics([{"speechd_worker_cpu_percent": 180.0,
                         "speechd_worker_resident_memory_bytes": 1.5 * 2**30}])  # fmt: skip
    listener = ListenerResult("c1", "a", 0.0, 0.5, 2.0, 0, 0.0, 2.0)
    run = Run(
        started="2026-12-01T00:00:00Z",
        quick=True,
        machine=Machine("cpu", 2, 8.0, "2.x", 2, "cpu", "3.11", 0.5),
        raw=None,
        runs=[
            ScenarioRun(
                "concurrency-1", "concurrency", "speechd", 1, 2.0, [listener], worker_metrics=m
            )
        ],
    )
    text = _markdown(build_report(run), [])
    assert "## The worker's figures in /metrics" in text
    assert "| speechd | concurrency-1 | 1 | 180% / 180% | 1536 | - | - |" in text
