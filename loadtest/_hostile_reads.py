"""The read-path parts of bench_hostile (issue 27): readers who ask a lot, and readers who read
slowly, must not cost the others.

words-load  on the real model under `speechd serve` (started here with the read quota out of
            the way, or `--url`): a 200,000-character wav cast of prose is generating, and an
            ordinary request's (`start: now`) time to first audio is taken `repeat` times (at
            most `ROUNDS`) alone, while 60 clients ask `/healthz` over and over (the control:
            what the clients cost the machine), and while 60 clients ask
            `/v1/casts/<id>/words` of the long cast (each load a process of its own), in turn;
            the medians' ratios (target <= 1.2x against alone), and how many answers came
            meanwhile and with what statuses.

whole-rss   `speechd api` on a fresh data folder, the real worker process beside it on the
            engine test double (harness/engines.py: the file's size is what matters, not
            its sound), one finished wav cast of about `--mib` MiB, then 64 clients asking for
            it with `stream: false` (each joins the finished cast) and reading slowly (64 KiB
            every 0.25 s) for `--hold` seconds; the api's RSS before and its peak meanwhile
            (target: under 300 MB), and whether each answer said its size up front.

`words_load(args)` and `whole_rss(args)` print their section; they never assert on speed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from ._words_clients import WORDS_CLIENTS

__all__ = ["whole_rss", "words_load"]

SLOW_READERS = 64
TARGET_RATIO = 1.2
TARGET_RSS_MB = 300
_QUOTA = ["--read-rate", "1000000", "--read-burst", "1000000"]


# -- words-load ------------------------------------------------------------------------------


async def _started(client: httpx.AsyncClient, url: str, text: str, chunks: int) -> str:
    """Submit `text` as a wav cast; its id once it has `chunks` chunks of audio."""
    made = await client.post(
        url + "/v1/casts", json={"input": text, "voice": "af_heart", "response_format": "wav"}
    )
    made.raise_for_status()
    cast_id: str = made.json()["id"]
    while True:
        status = (await client.get(f"{url}/v1/casts/{cast_id}")).json()
        if status["status"] == "failed":
            raise RuntimeError(f"the long cast failed: {status['error']}")
        if status["progress"]["chunks_done"] >= chunks:
            return cast_id
        await asyncio.sleep(0.5)


ROUNDS = 1
"""At most this many rounds of words-load, three ordinary casts each: an ordinary cast stays in
line after its first chunk (it waits for the long one to end: nothing cancels a cast), and a
worker makes the first chunks of at most `AHEAD` (4) such casts ahead of their turn."""

#: What the clients ask for in each condition but "alone": the control asks for something
#: that costs the server next to nothing, so that what sixty clients cost this machine's two
#: cores themselves (most of it, measured) is not counted against `/words`.
_LOADS = {"/healthz": "/healthz", "/words": "/v1/casts/{cast_id}/words"}


async def _first_audio(client: httpx.AsyncClient, url: str, text: str) -> float:
    """Seconds from an ordinary request (`start: now`) to its first audio byte; the stream is
    closed then. Its first chunk is made ahead of its turn in line: on this CPU the device
    cannot keep a second listener beside a long torch cast in real time, so a smooth start
    waits for room (9 minutes and counting, once), which is not what this section measures."""
    body = {"voice": "af_heart", "input": text, "response_format": "pcm", "start": "now"}
    began = time.monotonic()
    async with client.stream("POST", url + "/v1/audio/speech", json=body) as response:
        response.raise_for_status()
        async for piece in response.aiter_raw():
            if piece:
                return time.monotonic() - began
    raise RuntimeError("no audio")


class _Clients:
    """A `loadtest._words_clients` process per load, told go/pause/stop on its stdin."""

    def __init__(self) -> None:
        self.procs: dict[str, asyncio.subprocess.Process] = {}

    async def start(self, url: str, name: str, path: str) -> None:
        self.procs[name] = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "loadtest._words_clients", url, path,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip

    async def say(self, name: str, command: str) -> None:
        stdin = self.procs[name].stdin
        assert stdin is not None
        stdin.write(command.encode() + b"\n")
        await stdin.drain()

    async def stop(self) -> dict[str, dict[int, int]]:
        """Their answers' statuses, per load."""
        answered = {}
        for name, proc in self.procs.items():
            await self.say(name, "stop")
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), 120)
            answered[name] = {int(k): v for k, v in sorted(json.loads(line or b"{}").items())}
        return answered

    async def close(self) -> None:
        for proc in self.procs.values():
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            await proc.wait()


async def _words_runs(url: str, repeat: int, long_text: str) -> None:
    from .bench_hostile import ORDINARY, _ttfa

    clients = _Clients()
    runs: dict[str, list[float]] = {"alone": [], **{name: [] for name in _LOADS}}
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=900.0)) as client:
        await _ttfa(client, url, "Warming up.")
        cast_id = await _started(client, url, long_text, chunks=3)
        try:
            for name, path in _LOADS.items():
                await clients.start(url, name, path.format(cast_id=cast_id))
            for i in range(min(repeat, ROUNDS)):
                text = ORDINARY.format(n=f"alone {i}")
                runs["alone"].append(await _first_audio(client, url, text))
                for name in _LOADS:
                    await clients.say(name, "go")
                    await asyncio.sleep(2.0)  # the 60 clients are asking by now
                    text = ORDINARY.format(n=f"beside {name} {i}")
                    runs[name].append(await _first_audio(client, url, text))
                    await clients.say(name, "pause")
            answered = await clients.stop()
        finally:
            await clients.close()
        status = (await client.get(f"{url}/v1/casts/{cast_id}")).json()
        words = (await client.get(f"{url}/v1/casts/{cast_id}/words")).json()
    for name, label in (("alone", "alone"), *((n, f"beside 60 {n} clients") for n in _LOADS)):
        print(f"   {label:<28} " + "  ".join(f"{r:6.2f} s" for r in runs[name]))
    median = {name: max(statistics.median(r), 1e-9) for name, r in runs.items()}
    words_s = median["/words"]
    print(
        f"   first audio beside the /words clients / alone: {words_s / median['alone']:.2f}x"
        f" (target <= {TARGET_RATIO}x); / beside the /healthz clients:"
        f" {words_s / median['/healthz']:.2f}x (what /words costs beyond its clients)"
    )
    for name in _LOADS:
        counts = answered[name]
        print(f"   {name} answers meanwhile: {sum(counts.values())} (statuses {counts})")
    print(
        f"   the long cast: {status['status']}, {status['progress']['chunks_done']} chunks,"
        f" {len(words['words'])} words"
    )


def words_load(args: argparse.Namespace) -> None:
    from ._servers import speechd_at
    from .bench_hostile import PROSE, repeat

    print(f"\nwords-load: an ordinary request's first audio, alone and beside {WORDS_CLIENTS}")
    print("   clients asking /words of a 200,000-character wav cast that is generating")
    with (
        tempfile.TemporaryDirectory(prefix="bench-hostile-") as work,
        speechd_at(
            args.url, model_dir=args.model_dir, device=args.device, threads=args.threads,
            workdir=Path(work), extra=_QUOTA,
        ) as url,
    ):  # fmt: skip
        asyncio.run(_words_runs(url, args.repeat, repeat(PROSE, 200_000)))


# -- whole-rss -------------------------------------------------------------------------------


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1000
    return 0.0


@contextlib.contextmanager
def _sampled(pid: int) -> Iterator[list[float]]:
    """The RSS of `pid` in MB, sampled every 0.1 s while the block runs."""
    samples: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append(_rss_mb(pid))
            done.wait(0.1)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        done.set()
        thread.join()


async def _slow_readers(url: str, body: dict[str, Any], hold_s: float) -> Counter[str]:
    """`SLOW_READERS` clients asking for the finished cast whole, each reading 64 KiB every
    0.25 s for `hold_s` seconds; what their answers said up front."""
    said: Counter[str] = Counter()
    limits = httpx.Limits(max_connections=SLOW_READERS + 4)
    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0), limits=limits) as client:

        async def read() -> None:
            deadline = time.monotonic() + hold_s
            async with client.stream("POST", url + "/v1/audio/speech", json=body) as answer:
                sized = "content-length" in answer.headers
                said[f"{answer.status_code}, {'sized' if sized else 'chunked'}"] += 1
                async for _ in answer.aiter_raw(64 * 1024):
                    if time.monotonic() > deadline:
                        return
                    await asyncio.sleep(0.25)

        await asyncio.gather(*(read() for _ in range(SLOW_READERS)))
    return said


async def _finished(url: str, text: str) -> int:
    """Make `text` a wav cast and wait until it is done: its file's size."""
    async with httpx.AsyncClient(timeout=60) as client:
        made = await client.post(
            url + "/v1/casts", json={"input": text, "voice": "af_heart", "response_format": "wav"}
        )
        made.raise_for_status()
        cast_id: str = made.json()["id"]
        while True:
            status = (await client.get(f"{url}/v1/casts/{cast_id}")).json()["status"]
            if status == "done":
                break
            if status == "failed":
                raise RuntimeError("the big cast failed")
            await asyncio.sleep(0.5)
        one = await client.get(f"{url}/v1/casts/{cast_id}/audio", headers={"range": "bytes=0-0"})
        return int(one.headers["content-range"].rsplit("/", 1)[1])


def whole_rss(args: argparse.Namespace) -> None:
    from harness.servers import start_server
    from harness.workers import worker_process

    # A speech request's input is at most 4,096 characters: the cost model is told how much
    # audio each makes, so that they make a wav of `mib` MiB (48 kB a second).
    text = " ".join(f"word{n}" for n in range(400))
    per_char = args.mib * 1024 * 1024 / 48_000 / len(text)
    print(f"\nwhole-rss: {SLOW_READERS} slow stream:false readers of a finished wav cast")
    with tempfile.TemporaryDirectory(prefix="bench-hostile-rss-") as folder:
        data = Path(folder) / "data"
        flags = ["api", "--data-dir", str(data), "--log-level", "warning", *_QUOTA]
        with (
            # The worker makes the file as fast as it can (no listener to keep ahead of).
            worker_process(data, lead_s=1e9, rtf=0.001, audio_per_char=per_char),
            start_server(flags) as live,
        ):
            size = asyncio.run(_finished(live.url, text))
            pid = live.process.pid
            time.sleep(1.0)
            before = _rss_mb(pid)
            body = {"input": text, "voice": "af_heart", "response_format": "wav", "stream": False}
            with _sampled(pid) as samples:
                said = asyncio.run(_slow_readers(live.url, body, args.hold))
    peak = max(samples, default=before)
    print(f"   the file: {size / 1e6:.1f} MB; answers: {dict(said)}")
    print(
        f"   api RSS before {before:.0f} MB, peak while they read {peak:.0f} MB"
        f" (+{peak - before:.0f} MB; target: under {TARGET_RSS_MB} MB)"
    )
