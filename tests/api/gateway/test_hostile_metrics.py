"""/metrics is open, so it holds no cast id (a cast id is the capability to read the cast) and
no label value a request chose (issue 14)."""

from __future__ import annotations

import re

import httpx

from speechd.durable import Store
from speechd.telemetry._top import parse_metrics, render_top
from tests.api.gateway._support import LiveServer, StepEngine, status_when, submit

_SERIES = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? ", re.M)


def series(text: str) -> set[str]:
    return {name + (labels or "") for name, labels in _SERIES.findall(text)}


async def test_metrics_hold_no_cast_id_while_casts_generate(
    store: Store, engine: StepEngine, server: LiveServer, http: httpx.AsyncClient
) -> None:
    engine.hold()
    words = " ".join(f"word{n}" for n in range(40))
    ids = [await submit(http, f"Cast number {n}: {words}") for n in range(3)]
    engine.allow(1)  # the first chunk of the first: generating, with a lead
    await status_when(store, ids[0], lambda s: s.chunks_done >= 1)
    text = (await http.get("/metrics")).text
    for cast_id in ids:  # queued or generating, none is named
        assert cast_id not in text
    assert "cast=" not in text
    assert "speechd_active_casts 1.0" in text
    assert "speechd_cast_lead_seconds_gcount 1.0" in text
    assert 'speechd_cast_lead_seconds_bucket{le="+Inf"} 1.0' in text
    assert "speechd_cast_lead_min_seconds " in text
    view = parse_metrics(text)  # what `speechd top` shows of it: figures, never a cast
    assert view.lead_min_s is not None and view.lead_mean_s is not None
    assert " s min, " in render_top(view, url="u", at=0, interval_s=1)
    engine.run_free()


async def test_requests_cannot_mint_series(server: LiveServer, http: httpx.AsyncClient) -> None:
    await http.get("/metrics")
    before = series((await http.get("/metrics")).text)
    for n in range(50):
        await http.request(f"BREW{n}", f"/v1/casts/AAAAAAAAAAAAAAAAAAAAA{n % 10}x")
        await http.get(f"/no/such/route/{n}")
        await http.get(f"/v1/casts/{'B' * 22}/records?seq_num={n}")
    after = series((await http.get("/metrics")).text)
    minted = {s for s in after - before if "speechd_http_requests" in s}
    # At most a handful of new (route, method, status) combinations, none from the requests.
    assert len(minted) <= 12, sorted(minted)
    assert not any("BREW" in s or "/no/such" in s or "BBBB" in s for s in after)
    assert any('method="other"' in s for s in after)


async def test_stream_gauges(server: LiveServer, http: httpx.AsyncClient) -> None:
    text = (await http.get("/metrics")).text
    assert "speechd_streams_open 0.0" in text
    assert 'speechd_streams_refused_total{cap="client"} 0.0' in text
    assert 'speechd_streams_refused_total{cap="total"} 0.0' in text
