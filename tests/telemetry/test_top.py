"""`speechd top`: one frame from a live api, the figures it reads, no cast id ever shown,
a live view that refreshes, and one line when the api cannot be read."""

from __future__ import annotations

import io
from pathlib import Path

import httpx
import pytest
from litestar.testing import TestClient

from speechd.api.app import create_app
from speechd.cli import main
from speechd.config import Settings
from speechd.telemetry import Telemetry, run_top
from speechd.telemetry._top import parse_metrics, render_top
from tests.telemetry._support import WORKER, Board, running_worker

METRICS = """\
# TYPE speechd_workers_ready gauge
speechd_workers_ready 2.0
# TYPE speechd_queue_depth gauge
speechd_queue_depth 5.0
# TYPE speechd_active_casts gauge
speechd_active_casts 3.0
# TYPE speechd_cast_lead_seconds gauge
speechd_cast_lead_seconds{cast="c-SECRETcastid1"} 12.5
speechd_cast_lead_seconds{cast="c-SECRETcastid2"} 1.5
speechd_cast_lead_seconds{cast="c-SECRETcastid3"} 30.0
# TYPE speechd_worker_info gauge
speechd_worker_info{device="cuda:0",device_name="NVIDIA H200",telemetry="nvml",worker="gpu-1"} 1.0
speechd_worker_info{device="cpu",device_name="",telemetry="cpu",worker="cpu-1"} 1.0
# TYPE speechd_worker_cpu_percent gauge
speechd_worker_cpu_percent{worker="gpu-1"} 45.0
speechd_worker_cpu_percent{worker="cpu-1"} 198.0
# TYPE speechd_worker_resident_memory_bytes gauge
speechd_worker_resident_memory_bytes{worker="gpu-1"} 1.3958643712e+09
# TYPE speechd_device_gpu_utilization_percent gauge
speechd_device_gpu_utilization_percent{worker="gpu-1"} 97.0
# TYPE speechd_device_power_watts gauge
speechd_device_power_watts{rail="board",worker="gpu-1"} 312.4
# TYPE speechd_device_memory_used_bytes gauge
speechd_device_memory_used_bytes{kind="gpu",worker="gpu-1"} 2.147483648e+09
# TYPE speechd_device_memory_total_bytes gauge
speechd_device_memory_total_bytes{kind="gpu",worker="gpu-1"} 1.49e+11
# TYPE speechd_worker_energy_per_audio_second_joules gauge
speechd_worker_energy_per_audio_second_joules{worker="gpu-1"} 4.1
# TYPE speechd_device_temperature_celsius gauge
speechd_device_temperature_celsius{sensor="gpu",worker="gpu-1"} 61.0
speechd_device_temperature_celsius{sensor="mem",worker="gpu-1"} 70.0
"""


def test_the_frame_shows_workers_devices_casts_and_leads_but_no_cast_id() -> None:
    view = parse_metrics(METRICS)
    assert (view.workers_ready, view.generating, view.queued) == (2, 3, 2)
    assert view.leads_s == [1.5, 12.5, 30.0]
    frame = render_top(view, url="http://h:8000", at=0.0, interval_s=2)
    assert "SECRET" not in frame and "c-" not in frame
    assert "casts 3 generating, 2 queued" in frame
    assert "leads 1.5 s min, 12.5 s median, 30.0 s max" in frame
    [gpu] = [line for line in frame.splitlines() if line.startswith("gpu-1")]
    for figure in ("cuda:0 NVIDIA H200", "45%", "1.3 GiB", "97%", "2.0/139 GiB", "312.4 W",
                   "4.10", "70 C"):  # fmt: skip
        assert figure in gpu, figure
    [cpu] = [line for line in frame.splitlines() if line.startswith("cpu-1")]
    assert "198%" in cpu and "W" not in cpu


def test_leads_without_labels_or_as_a_histogram_still_show() -> None:
    histogram = (
        "# TYPE speechd_cast_lead_seconds histogram\n"
        'speechd_cast_lead_seconds_bucket{le="+Inf"} 4.0\n'
        "speechd_cast_lead_seconds_sum 20.0\n"
        "speechd_cast_lead_seconds_count 4.0\n"
    )
    view = parse_metrics(histogram)
    assert view.lead_mean_s == 5.0
    assert "leads 5.0 s mean" in render_top(view, url="u", at=0, interval_s=1)
    assert "no ready worker" in render_top(parse_metrics(""), url="u", at=0, interval_s=1)


def test_leads_as_speechds_gauge_histogram_show_their_min_and_mean() -> None:
    gauge_histogram = (  # as speechd.api.metrics renders it (tests/api/gateway checks it live)
        "# TYPE speechd_cast_lead_seconds histogram\n"
        'speechd_cast_lead_seconds_bucket{le="2"} 1.0\n'
        'speechd_cast_lead_seconds_bucket{le="+Inf"} 3.0\n'
        "# TYPE speechd_cast_lead_seconds_gcount gauge\n"
        "speechd_cast_lead_seconds_gcount 3.0\n"
        "# TYPE speechd_cast_lead_seconds_gsum gauge\n"
        "speechd_cast_lead_seconds_gsum 44.0\n"
        "# TYPE speechd_cast_lead_min_seconds gauge\n"
        "speechd_cast_lead_min_seconds 1.5\n"
    )
    view = parse_metrics(gauge_histogram)
    assert (view.lead_min_s, view.lead_mean_s) == (1.5, 44.0 / 3)
    frame = render_top(view, url="u", at=0, interval_s=1)
    assert "leads 1.5 s min, 14.7 s mean" in frame


def test_one_frame_from_a_live_api(tmp_path: Path) -> None:
    telemetry = Telemetry(Board(), device_name="Orin", interval_s=0.05).start()
    app = create_app(Settings(data_dir=str(tmp_path / "data")))
    with running_worker(tmp_path / "data", telemetry), TestClient(app) as client:
        out = io.StringIO()
        assert run_top("http://testserver.local", once=True, out=out, client=client) == 0
    frame = out.getvalue()
    assert "workers 1 ready" in frame
    [row] = [line for line in frame.splitlines() if line.startswith(WORKER)]
    assert "cpu Orin" in row and "99%" in row and "9.9 W" in row


def test_the_live_view_refreshes_until_interrupted() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return httpx.Response(200, text=METRICS)

    out = io.StringIO()
    with (
        httpx.Client(transport=httpx.MockTransport(handler)) as client,
        pytest.raises(KeyboardInterrupt),
    ):
        run_top("http://h", interval_s=0.01, out=out, client=client)
    assert calls == ["/metrics"] * 3
    assert out.getvalue().count("speechd top  http://h") == 2


def test_an_api_that_cannot_be_read_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["top", "--once", "--url", "http://127.0.0.1:9"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("speechd top: cannot read http://127.0.0.1:9/metrics:")
    assert "\n" not in err
