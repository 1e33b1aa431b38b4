"""Idle unload on the real Kokoro-82M weights (printed figures, not timed tests).

    python -m loadtest.bench_device --model-dir ~/.cache/speechd/kokoro-82m [--device cpu]
        [--engines torch,onnx] [--idle-unload 3] [--rounds 3] [--threads N]
        [--max-device-memory SIZE]

For each runtime it starts `speechd serve --idle-unload N` (a fresh data folder), and for each
round: makes a cast while the model is held (its first audio: "warm"), waits until the worker
has given the model back (/readyz says `idle`), then makes another cast, which wakes it (its
first audio: "idle"). Every request streams 16-bit PCM with `start: now` (no start hold, so
first audio is when the first chunk lands), and each round's texts differ (a cast id is its
content: the same text would be a replay).

Printed per runtime, one row per round, then the medians:
  - worker RSS while the model is held, just after it was given back (the worker's own
    figure at the unload) and after the wake (MiB; the worker's sampled RSS from /metrics);
  - the wake: the model's load as the worker measured it (from the chunk that needed it to
    the model held, warm-up included);
  - first audio of a cast that arrives warm, and of one that arrives while idle; "idle -
    wake" is what the idle cast waited beyond the wake itself, which should be about the warm
    cast's first audio (it waits for the load, and no longer).

On a GPU (--device cuda) the same run also prints what the worker holds on the device
(torch's reserve) after each step; the sanity check's figures are in the server's log
(scripts/gpu_check.sh prints them).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from ._servers import Server, start_speechd

TEXT = (
    "Round {n}: the lighthouse keeper climbed the narrow stairs just before the sun slipped "
    "below the hills, lit the great lamp, and wound the brass clockwork for the night."
)
MIB = 1 << 20


@dataclass
class Round:
    rss_held: float | None
    rss_unloaded: float | None
    rss_woken: float | None
    wake_s: float | None
    warm_s: float
    idle_s: float
    held_device: list[float | None]

    @property
    def beyond_wake_s(self) -> float | None:
        return None if self.wake_s is None else self.idle_s - self.wake_s


def _metrics(url: str) -> dict[str, float]:
    """The worker's figures in /metrics (one worker: each family's first sample)."""
    found: dict[str, float] = {}
    text = httpx.get(url + "/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "speechd_worker_model_state":
                if sample.value:
                    found["state:" + sample.labels.get("state", "")] = 1.0
            else:
                found.setdefault(sample.name, sample.value)
    return found


def _first_audio_s(url: str, text: str) -> float:
    """Seconds from the request to the first bytes of audio of a streamed PCM speech."""
    body = {"input": text, "response_format": "pcm", "start": "now", "voice": "af_heart"}
    started = time.perf_counter()
    first: float | None = None
    with httpx.stream("POST", url + "/v1/audio/speech", json=body, timeout=600) as response:
        response.raise_for_status()
        for piece in response.iter_bytes():
            if piece and first is None:
                first = time.perf_counter() - started
    if first is None:
        raise RuntimeError("the speech had no audio")
    return first


def _model_state(url: str) -> str:
    try:
        return str(httpx.get(url + "/readyz", timeout=5).json().get("model", ""))
    except (httpx.HTTPError, ValueError):
        return ""


def _wait(what: str, check: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen in {timeout:.0f} s")
        time.sleep(0.2)


def _rss_now(url: str, after: float) -> float | None:
    """The worker's RSS (MiB) as it sampled it, once a sample newer than `after` is in."""
    time.sleep(max(0.0, after + 1.5 - time.monotonic()))  # the sampler reads every second
    value = _metrics(url).get("speechd_worker_resident_memory_bytes")
    return None if value is None else value / MIB


def _device_held(url: str) -> float | None:
    value = _metrics(url).get("speechd_worker_device_memory_held_bytes")
    return None if value is None else value / MIB


def run_round(server: Server, n: int, idle_unload: float) -> Round:
    url = server.url
    warm = _first_audio_s(url, TEXT.format(n=f"{n} warm"))
    held = _rss_now(url, time.monotonic())
    held_device = [_device_held(url)]
    _wait("the idle unload", lambda: _model_state(url) == "idle", 10 * idle_unload + 120)
    figures = _metrics(url)
    unloaded = figures.get("speechd_worker_unloaded_resident_memory_bytes")
    held_device.append(_device_held(url))
    idle = _first_audio_s(url, TEXT.format(n=f"{n} idle"))
    woken = _rss_now(url, time.monotonic())
    held_device.append(_device_held(url))
    wake = _metrics(url).get("speechd_worker_model_wake_seconds")
    return Round(
        rss_held=held,
        rss_unloaded=None if unloaded is None else unloaded / MIB,
        rss_woken=woken,
        wake_s=wake,
        warm_s=warm,
        idle_s=idle,
        held_device=held_device,
    )


def _fmt(value: float | None, pattern: str = ".0f") -> str:
    return "-" if value is None else format(value, pattern)


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def report(engine: str, rounds: list[Round], device: str) -> None:
    print(f"\n== {engine} on {device}: idle unload and wake ({len(rounds)} rounds)")
    header = (
        "round  RSS held  unloaded  woken (MiB)  wake s  first audio warm  idle  idle - wake"
    )
    print(header)
    for n, r in enumerate(rounds, start=1):
        print(
            f"{n:>5}  {_fmt(r.rss_held):>8}  {_fmt(r.rss_unloaded):>8}  {_fmt(r.rss_woken):>11}"
            f"  {_fmt(r.wake_s, '.2f'):>6}  {r.warm_s:>16.2f}  {r.idle_s:>4.2f}"
            f"  {_fmt(r.beyond_wake_s, '.2f'):>11}"
        )
    print(
        f"{'median':>5}  {_fmt(_median([r.rss_held for r in rounds])):>8}"
        f"  {_fmt(_median([r.rss_unloaded for r in rounds])):>8}"
        f"  {_fmt(_median([r.rss_woken for r in rounds])):>11}"
        f"  {_fmt(_median([r.wake_s for r in rounds]), '.2f'):>6}"
        f"  {_fmt(_median([r.warm_s for r in rounds]), '.2f'):>16}"
        f"  {_fmt(_median([r.idle_s for r in rounds]), '.2f'):>4}"
        f"  {_fmt(_median([r.beyond_wake_s for r in rounds]), '.2f'):>11}"
    )
    held = _median([r.rss_held for r in rounds])
    unloaded = _median([r.rss_unloaded for r in rounds])
    if held is not None and unloaded is not None:
        print(f"the unload gave back {held - unloaded:.0f} MiB of {held:.0f} (median)")
    if any(v is not None for r in rounds for v in r.held_device):
        steps = ["held", "unloaded", "woken"]
        for n, r in enumerate(rounds, start=1):
            shown = ", ".join(f"{s} {_fmt(v)}" for s, v in zip(steps, r.held_device, strict=True))
            print(f"round {n}: device memory the worker holds (MiB): {shown}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.bench_device", description=__doc__)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--engines", default="torch,onnx")
    parser.add_argument("--idle-unload", type=float, default=3.0, help="seconds (3)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--max-device-memory", help="e.g. 2G (default: no cap)")
    args = parser.parse_args(argv)
    extra = ["--idle-unload", f"{args.idle_unload:g}s"]
    if args.max_device_memory:
        extra += ["--max-device-memory", args.max_device_memory]
    with tempfile.TemporaryDirectory(prefix="bench-device-") as workdir:
        for engine in [e.strip() for e in args.engines.split(",") if e.strip()]:
            server = start_speechd(
                f"speechd-{engine}",
                policy="deadline",
                model_dir=args.model_dir,
                device=args.device,
                threads=args.threads,
                workdir=Path(workdir),
                engine=engine,
                extra=extra,
            )
            try:
                server.wait_ready()
                rounds = [run_round(server, n, args.idle_unload) for n in range(args.rounds)]
            except Exception:
                print(server.log(), file=sys.stderr)
                raise
            finally:
                server.stop()
            report(engine, rounds, args.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
