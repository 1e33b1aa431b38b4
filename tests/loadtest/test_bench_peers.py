"""loadtest.bench_peers without the peers: where it looks for them, what it refuses to start
without, and the ratios it prints (the runs themselves need the peers installed: run the
benchmark, as its docstring says)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.bench_peers import Peers, Row, main, report


def _row(server: str, level: int, per_s: float, first: float | None) -> Row:
    return Row(server, level, 8, 80.0, 80.0 / per_s, per_s, first, first, 0, 0.0, {}, 0.5, 0.6)


def test_the_peers_folder_layout_and_what_is_missing_from_it(tmp_path: Path) -> None:
    peers = Peers.under(tmp_path)
    assert peers.fastkokoro == tmp_path / "venv-fastkokoro" / "bin" / "fastkokoro"
    assert peers.kokoro_pi_models == tmp_path / "kp-models"
    assert peers.missing("speechd") == []
    (tmp_path / "kp-models").mkdir()
    assert peers.missing("kokoro-pi") == [peers.kokoro_pi, peers.kokoro_pi_config]


def test_a_peer_that_is_not_set_up_is_refused_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--servers", "fastkokoro", "--peers-dir", str(tmp_path)])
    assert exited.value.code == 2
    assert "fastkokoro: missing" in capsys.readouterr().err


def test_speechd_is_compared_with_the_best_peer_and_the_streaming_ones_first_audio(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report(
        [
            _row("speechd", 1, 3.0, 0.5),
            _row("fastkokoro", 1, 2.3, 1.8),
            _row("kokoro-pi", 1, 2.5, 9.7),  # the best peer, but its route does not stream
            _row("speechd", 2, 2.6, 0.9),
            _row("fastkokoro", 2, 2.2, 2.0),
            _row("kokoro-pi", 2, 2.4, 12.0),
        ]
    )
    out = capsys.readouterr().out
    assert (
        "1 stream(s): speechd makes 1.20x the audio per second of the best peer (kokoro-pi" in out
    )
    assert "first audio p50 0.28x fastkokoro's (target <= 0.6x)" in out
    assert "2 stream(s): speechd makes 1.08x" in out
