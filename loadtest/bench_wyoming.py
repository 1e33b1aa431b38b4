"""Wyoming benchmark: speechd's door against wyoming-kokoro-torch (printed figures, not tests).

    python -m loadtest.bench_wyoming --model-dir ~/.cache/speechd/kokoro-82m [--device cpu]
        [--threads N] [--anchor-python .venv-anchor/bin/python] [--connections 1,4]
        [--rounds 2] [--rate 15] [--only speechd|anchor]

Two servers, one at a time, on the same weights and voice (af_heart), the same texts, driven
by the `wyoming` package's own client as Home Assistant drives them (a connection per
request; a streamed reply written by one task while another reads its audio):

  speechd   `speechd serve --wyoming-uri tcp://127.0.0.1:P` (its worker, a fresh store)
  anchor    wyoming-kokoro-torch 3.2.0 `--streaming`, in its own virtual environment
            (`--anchor-python`; see `loadtest/_anchor.py` for running it offline)

At each number of connections (all at once, each its own text so nothing is a replay):

  one-shot  `synthesize` of a 3-sentence text: first audio (first `audio-chunk` after the
            request) and last audio (`audio-stop`)
  streamed  a 3-sentence reply streamed at `--rate` tokens a second (`synthesize-start`,
            chunks, the whole text, `synthesize-stop`): first audio after the token that ends
            the first sentence was sent, and last audio after the last token

Targets (issue 28): speechd's first audio <= 0.5x the anchor's, its streamed first audio
<= 0.5x, its last audio <= 1.1x; at 4 connections every speechd connection's first audio no
later than the anchor's at 1. Each server gets one warm-up request first. The load average is
printed at the start and the end: figures taken beside other work are void.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from wyoming.client import AsyncTcpClient
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop
from wyoming.tts import SynthesizeVoice as Voice

from ._servers import ROOT, _free_port

VOICE = "af_heart"
TEXTS = [
    "The kitchen lights are off and the front door is locked. The heating will come on at "
    "six tomorrow morning. Your first meeting starts at half past nine.",
    "It is raining in the city and the wind is picking up from the west. Expect heavy showers "
    "until late in the evening. The weekend should be dry and a little warmer.",
    "Your parcel left the depot this morning and is on its way. The driver expects to arrive "
    "between two and four. Someone will need to sign for it at the door.",
    "The washing machine finished its cycle ten minutes ago. The dryer is still running and "
    "has about twenty minutes left. Both filters could do with a clean this week.",
]
_SENTENCE_ENDS = tuple(".!?")
_READ_S = 600.0  # a failsafe per event


def tokens_of(text: str) -> list[str]:
    """The text as a chat model streams it: words with their leading space, long words in
    two pieces."""
    out: list[str] = []
    for n, word in enumerate(text.split(" ")):
        lead = " " if n else ""
        out += [lead + word[:4], word[4:]] if len(word) > 7 else [lead + word]
    return out


@dataclass
class Timing:
    test: str
    connections: int
    first: float  # seconds to the first audio (from the request, or the first sentence's end)
    last: float  # seconds to the last audio (from the request, or the last token)


async def _read_audio(client: AsyncTcpClient, streamed: bool) -> tuple[float, float]:
    """When the first audio came, and when the last did (`audio-stop`, or
    `synthesize-stopped` for a stream)."""
    first: float | None = None
    last = 0.0
    while True:
        event = await asyncio.wait_for(client.read_event(), _READ_S)
        if event is None:
            raise RuntimeError("the server closed the connection")
        now = time.monotonic()
        if event.type == "error":
            raise RuntimeError(f"the server refused: {event.data}")
        if event.type == "audio-chunk":
            first = now if first is None else first
            last = now
        if event.type == ("synthesize-stopped" if streamed else "audio-stop"):
            if first is None:
                raise RuntimeError("no audio came")
            return first, last


async def one_shot(port: int, text: str, connections: int) -> Timing:
    async with AsyncTcpClient("127.0.0.1", port) as client:
        sent = time.monotonic()
        await client.write_event(Synthesize(text=text, voice=Voice(name=VOICE)).event())
        first, last = await _read_audio(client, streamed=False)
    return Timing("one-shot", connections, first - sent, last - sent)


async def streamed(port: int, text: str, connections: int, rate: float) -> Timing:
    tokens = tokens_of(text)
    sent: list[float] = []
    async with AsyncTcpClient("127.0.0.1", port) as client:

        async def write() -> None:
            await client.write_event(SynthesizeStart(voice=Voice(name=VOICE)).event())
            began = time.monotonic()
            for n, token in enumerate(tokens):
                await asyncio.sleep(max(0.0, began + n / rate - time.monotonic()))
                await client.write_event(SynthesizeChunk(text=token).event())
                sent.append(time.monotonic())
            await client.write_event(Synthesize(text=text, voice=Voice(name=VOICE)).event())
            await client.write_event(SynthesizeStop().event())

        writing = asyncio.ensure_future(write())
        try:
            first, last = await _read_audio(client, streamed=True)
        finally:
            await writing
    sentence_end = next(
        at for token, at in zip(tokens, sent, strict=True) if token.endswith(_SENTENCE_ENDS)
    )
    return Timing("streamed", connections, first - sentence_end, last - sent[-1])


async def measure(port: int, counts: list[int], rounds: int, rate: float) -> list[Timing]:
    await one_shot(port, "Warming up the voice.", 0)  # loads what a first request loads
    out: list[Timing] = []
    for n in range(rounds):
        for count in counts:
            # Each request its own text: an identical one would be a replay on speechd.
            texts = [f"{TEXTS[i % len(TEXTS)]} This is request {n + 1}." for i in range(count)]
            out += await asyncio.gather(*(one_shot(port, t, count) for t in texts))
            texts = [f"{TEXTS[i % len(TEXTS)]} This was reply {n + 1}." for i in range(count)]
            out += await asyncio.gather(*(streamed(port, t, count, rate) for t in texts))
    return out


# -- the servers, one at a time ---------------------------------------------------------------


def _env(threads: int | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPEECHD_")}
    env["HF_HUB_OFFLINE"] = "1"
    env["PYTHONPATH"] = str(ROOT)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def _wait_port(port: int, process: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the server exited {process.returncode}:\n{tail}")
        try:
            asyncio.run(_describe(port))
            return
        except (OSError, asyncio.TimeoutError):
            time.sleep(0.5)
    raise TimeoutError(f"no Wyoming server on port {port} after {timeout:.0f} s")


async def _describe(port: int) -> None:
    from wyoming.info import Describe

    async with AsyncTcpClient("127.0.0.1", port) as client:
        await client.write_event(Describe().event())
        event = await asyncio.wait_for(client.read_event(), 30)
        if event is None or event.type != "info":
            raise OSError("not ready")  # speechd answers an error until its worker is ready


@contextmanager
def _running(argv: list[str], env: dict[str, str], port: int, work: Path) -> Iterator[None]:
    log = work / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_port(port, process, log, timeout=600)
        yield
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def speechd_argv(port: int, args: argparse.Namespace, work: Path) -> list[str]:
    argv = [sys.executable, "-m", "speechd", "serve", "--port", str(_free_port())]
    argv += ["--data-dir", str(work / "data"), "--device", args.device, "--log-level", "warning"]
    argv += ["--wyoming-uri", f"tcp://127.0.0.1:{port}", "--start", args.start]
    if args.model_dir:
        argv += ["--model-dir", args.model_dir]
    if args.threads:
        argv += ["--threads", str(args.threads)]
    return argv


def anchor_argv(port: int, args: argparse.Namespace) -> list[str]:
    model = Path(args.model_dir).expanduser()
    argv = [args.anchor_python, str(ROOT / "loadtest" / "_anchor.py")]
    argv += ["--uri", f"tcp://127.0.0.1:{port}", "--voice", VOICE, "--streaming"]
    argv += ["--data-dir", str(model), "--data-dir", str(model / "voices")]
    return [*argv, "--device", args.device]


# -- the report -------------------------------------------------------------------------------


def _stats(rows: list[Timing], test: str, count: int) -> tuple[float, float, float] | None:
    chosen = [r for r in rows if r.test == test and r.connections == count]
    if not chosen:
        return None
    firsts = [r.first for r in chosen]
    return statistics.median(firsts), max(firsts), statistics.median(r.last for r in chosen)


def report(results: dict[str, list[Timing]], counts: list[int]) -> None:
    print(f"   {'server':<8} {'conns':>5} {'test':<9} {'first audio':>12} {'worst first':>12}"
          f" {'last audio':>11}")  # fmt: skip
    for name, rows in results.items():
        for count in counts:
            for test in ("one-shot", "streamed"):
                stats = _stats(rows, test, count)
                if stats is not None:
                    print(f"   {name:<8} {count:5d} {test:<9} {stats[0]:10.2f} s {stats[1]:10.2f} s"
                          f" {stats[2]:9.2f} s")  # fmt: skip
    if set(results) != {"speechd", "anchor"}:
        return
    ours, theirs = results["speechd"], results["anchor"]
    print("   against the targets (medians; streamed first audio after the first sentence):")
    for test, first_target in (("one-shot", 0.5), ("streamed", 0.5)):
        mine, anchor = _stats(ours, test, 1), _stats(theirs, test, 1)
        if mine is None or anchor is None:
            continue
        first, last = mine[0] / anchor[0], mine[2] / anchor[2]
        print(f"   {test:<9} first audio {first:.2f}x the anchor's (target <= {first_target}x),"
              f" last audio {last:.2f}x (target <= 1.1x)")  # fmt: skip
    for test in ("one-shot", "streamed"):
        anchor_one, mine_four = _stats(theirs, test, 1), _stats(ours, test, 4)
        if anchor_one is None or mine_four is None:
            continue
        verdict = "met" if mine_four[1] <= anchor_one[0] else "missed"
        print(f"   {test:<9} at 4 connections speechd's worst first audio {mine_four[1]:.2f} s,"
              f" the anchor's at 1 {anchor_one[0]:.2f} s: {verdict}")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", default=os.environ.get("SPEECHD_TEST_MODEL_DIR"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, help="CPU threads for both servers' torch")
    parser.add_argument("--anchor-python", default=str(ROOT / ".venv-anchor" / "bin" / "python"))
    parser.add_argument("--connections", default="1,4", help="connection counts (1,4)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rate", type=float, default=15.0, help="tokens a second (15)")
    parser.add_argument("--start", choices=["smooth", "now"], default="smooth",
                        help="speechd's --start (smooth)")  # fmt: skip
    parser.add_argument("--only", choices=["speechd", "anchor"])
    args = parser.parse_args(argv)
    if not args.model_dir:
        parser.error("--model-dir (or SPEECHD_TEST_MODEL_DIR): the Kokoro-82M folder")
    counts = [int(c) for c in args.connections.split(",")]
    print(f"speechd Wyoming benchmark, {os.cpu_count()} CPUs, device {args.device}")
    print(f"   load average at the start {os.getloadavg()[0]:.1f}")
    results: dict[str, list[Timing]] = {}
    servers = [s for s in ("speechd", "anchor") if args.only in (None, s)]
    if "anchor" in servers and not Path(args.anchor_python).exists():
        print(f"   no anchor at {args.anchor_python}: speechd alone")
        servers.remove("anchor")
    for name in servers:
        port = _free_port()
        with tempfile.TemporaryDirectory(prefix=f"bench-wyoming-{name}-") as folder:
            work = Path(folder)
            if name == "speechd":
                command = speechd_argv(port, args, work)
            else:
                command = anchor_argv(port, args)
            with _running(command, _env(args.threads), port, work):
                results[name] = asyncio.run(measure(port, counts, args.rounds, args.rate))
    report(results, counts)
    print(f"   load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
