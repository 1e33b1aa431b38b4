"""The load generator's measuring and reporting on a tiny synthetic run (no servers, no model,
no timing): a listener's underruns, the derived figures, the goals and the report files."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.__main__ import main
from loadtest._listener import Listener
from loadtest._report import buffer_curve, build_report, load_report, write_report
from loadtest._results import (
    ListenerResult,
    Machine,
    RawResult,
    Rss,
    Run,
    ScenarioRun,
    offered_load,
    percentile,
    summarize,
)

PNG = b"\x89PNG\r\n\x1a\n"


def test_a_listener_plays_from_its_first_audio_and_stalls_on_late_audio() -> None:
    listener = Listener(submitted=10.0)
    listener.receive(10.5, 1.0)  # first audio: playback starts, 1 s buffered
    listener.receive(11.0, 1.0)  # half played: 0.5 s left, then 1.5 s
    listener.receive(13.5, 2.0)  # was due at 12.5: a 1 s gap
    listener.receive(14.0, 1.0)  # due at 15.5 now that playback slipped by the gap
    assert listener.ttfa == 0.5
    assert listener.underruns == 1
    assert listener.stall_s == pytest.approx(1.0)
    assert listener.received_s == 5.0
    assert listener.timeline == [(0.5, 0.0, 1.0), (1.0, 0.5, 1.5), (3.5, 0.0, 2.0), (4.0, 1.5, 2.5)]


def test_a_listener_that_got_nothing_has_no_time_to_first_audio() -> None:
    listener = Listener(submitted=1.0)
    listener.end(2.0, "http 503 no_worker")
    assert listener.ttfa is None and listener.error == "http 503 no_worker"


def _listener(
    label: str, text: str, at_s: float, arrivals: list[tuple[float, float]], **kw: str
) -> ListenerResult:
    """A listener result from (seconds after sending, audio seconds) arrivals."""
    player = Listener(submitted=at_s)
    for now, seconds in arrivals:
        player.receive(at_s + now, seconds)
    end = at_s + arrivals[-1][0] if arrivals else at_s + 1.0
    return ListenerResult(
        label=label,
        text=text,
        at_s=at_s,
        ttfa_s=player.ttfa,
        audio_s=player.received_s,
        underruns=player.underruns,
        gap_ms=1000 * player.stall_s,
        ended_s=end,
        timeline=player.timeline,
        **kw,
    )


def _scenario(  # type: ignore[no-untyped-def]
    name: str,
    target: str,
    listeners: list[ListenerResult],
    *,
    kind: str = "concurrency",
    concurrency: int | None = None,
    **measured,
) -> ScenarioRun:
    wall = max(x.ended_s or 0.0 for x in listeners)
    return ScenarioRun(name, kind, target, concurrency, wall, listeners, **measured)


RAW = RawResult(audio_s=20.0, gen_s=10.0, rtf=0.5, capacity=2.0, chunks=10, chunk_time_s=1.0)
RAW_ONNX = RawResult(
    audio_s=20.0, gen_s=7.0, rtf=0.35, capacity=20 / 7, chunks=10, chunk_time_s=0.7
)


def _run() -> Run:
    streamed = [(0.4, 2.0), (1.5, 2.0), (3.0, 2.0)]
    late = [(0.4, 1.0), (3.0, 1.0)]  # 1.6 s late
    whole = [(3.0, 6.0)]
    rss = Rss(api_mib=90.0, worker_mib=1500.0)
    runs = [
        _scenario(
            "concurrency-1",
            "speechd",
            [_listener("c1", "a", 0.0, streamed)],
            concurrency=1,
            rss_peak=rss,
            rss_end=rss,
            casts_new=1,
            casts_shared=0,
        ),
        _scenario(
            "concurrency-1",
            "speechd-fifo",
            [_listener("c1", "a", 0.0, [(0.8, 6.0)])],
            concurrency=1,
            rss_peak=rss,
            rss_end=rss,
            casts_new=1,
            casts_shared=0,
        ),
        _scenario("concurrency-1", "naive", [_listener("c1", "a", 0.0, whole)], concurrency=1),
        _scenario(
            "concurrency-2",
            "speechd",
            [_listener("c2-0", "b", 0.0, streamed), _listener("c2-1", "c", 0.0, late)],
            concurrency=2,
        ),
        _scenario(
            "concurrency-2",
            "speechd-onnx",
            [_listener("c2-0", "b", 0.0, streamed), _listener("c2-1", "c", 0.0, streamed)],
            concurrency=2,
        ),
        _scenario(
            "staggered",
            "speechd",
            [_listener("long", "d", 0.0, streamed), _listener("short", "e", 1.0, late)],
            kind="staggered",
        ),
        _scenario(
            "dedupe-8",
            "speechd",
            [_listener(f"same-{i}", "f", 0.0, streamed, cast_id="cast1") for i in range(8)],
            kind="dedupe",
            casts_new=1,
            casts_shared=7,
        ),
    ]
    machine = Machine(
        cpu="Test CPU",
        cores=2,
        ram_gib=8.0,
        torch="2.x",
        threads=2,
        device="cpu",
        python="3.11",
        load_before=1.0,
        load_after=1.5,
    )
    return Run(
        started="2026-01-01T00:00:00+00:00",
        quick=True,
        machine=machine,
        raw=RAW,
        runs=runs,
        wall_s=12.0,
        raw_onnx=RAW_ONNX,
    )


def test_summaries_count_shared_audio_once_and_errors_by_kind() -> None:
    listeners = [_listener(f"same-{i}", "f", 0.0, [(0.5, 3.0)], cast_id="x") for i in range(3)]
    listeners.append(_listener("refused", "g", 0.0, [], error="http 429 queue_full"))
    summary = summarize(_scenario("dedupe", "speechd", listeners, kind="dedupe"), RAW)
    assert summary.audio_s == 3.0  # one cast, three listeners
    assert summary.throughput == pytest.approx(3.0 / 1.0)
    assert summary.errors == {"http 429 queue_full": 1}
    assert summary.distinct_casts == 1
    assert summary.ttfa_p50_s == 0.5


def test_offered_load_is_the_most_casts_playing_at_once_times_the_rtf() -> None:
    overlapping = [_listener("a", "a", 0.0, [(0.1, 10.0)]), _listener("b", "b", 5.0, [(0.1, 2.0)])]
    apart = [_listener("a", "a", 0.0, [(0.1, 1.0)]), _listener("b", "b", 5.0, [(0.1, 2.0)])]
    assert offered_load(_scenario("x", "speechd", overlapping), rtf=0.4) == pytest.approx(0.8)
    assert offered_load(_scenario("x", "speechd", apart), rtf=0.4) == pytest.approx(0.4)


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 95) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([float(i) for i in range(1, 21)], 95) == 19.0


def test_goals_judge_speechd_against_the_naive_server_the_load_and_the_raw_engine() -> None:
    goals = build_report(_run()).goals
    ttfa, smooth, throughput, onnx_throughput, onnx_rtf = goals
    assert ttfa.met is True and "0.13x" in ttfa.measured  # 0.4 s vs 3.0 s
    # concurrency-1 (load 50%) streamed without a gap; the heavier scenarios do not count
    assert smooth.met is True and "concurrency-1 (50%): 0" in smooth.measured
    # concurrency-2: 6 + 2 s of audio in 3 s against a capacity of 2.0
    assert throughput.met is True and "2.67 vs 2.00 audio s/s (concurrency-2) = 1.33x" in (
        throughput.measured
    )
    # speechd-onnx against its own runtime's raw loop: 12 s of audio in 3 s against 2.86
    assert onnx_throughput.met is True and "4.00 vs 2.86 audio s/s" in onnx_throughput.measured
    assert onnx_rtf.met is True and "rtf 0.350 vs 0.500 = 0.70x" in onnx_rtf.measured


def test_goals_without_their_baselines_are_not_judged() -> None:
    run = _run()
    run.raw = run.raw_onnx = None
    run.runs = [r for r in run.runs if r.target != "naive"]
    assert [g.met for g in build_report(run).goals] == [None, None, None, None, None]


def test_the_report_is_written_and_redrawn_from_its_json(tmp_path: Path) -> None:
    run = _run()
    write_report(run, tmp_path)
    names = {p.name for p in tmp_path.iterdir()}
    assert {"report.json", "report.md", "ttfa_vs_concurrency.png"} <= names
    assert {"timeline_staggered.png", "timeline_concurrency-2.png"} <= names
    assert all((tmp_path / n).read_bytes().startswith(PNG) for n in names if n.endswith(".png"))
    assert load_report(tmp_path / "report.json").run == run
    markdown = (tmp_path / "report.md").read_text()
    assert "Measured on a shared machine" in markdown and "Test CPU, 2 cores" in markdown
    assert "| concurrency-1 | speechd | speechd-fifo | 0.50x |" in markdown  # 0.4 s vs 0.8 s
    assert "| concurrency-1 | speechd | naive | 0.13x |" in markdown
    assert "| concurrency-2 | speechd-onnx | speechd | 1.00x |" in markdown
    assert "Raw engine loop on ONNX Runtime" in markdown
    (tmp_path / "report.md").unlink()
    assert main(["report", str(tmp_path / "report.json")]) == 0
    assert (tmp_path / "report.md").read_text() == markdown


def test_the_buffer_curve_drains_to_zero_between_late_arrivals() -> None:
    xs, ys = buffer_curve(1.0, [(0.4, 0.0, 1.0), (3.0, 0.0, 1.0)])
    assert list(zip(xs, ys, strict=True)) == [
        (1.4, 0.0),
        (1.4, 1.0),
        (2.4, 0.0),
        (4.0, 0.0),
        (4.0, 1.0),
        (5.0, 0.0),
    ]
