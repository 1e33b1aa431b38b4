"""bench_hostile's pauses section (issue 36, items 1-2): what SSML breaks can still ask of the
worker, on the real model.

    python -m loadtest.bench_hostile --section pauses --model-dir ~/.cache/speechd/kokoro-82m
        [--device cpu] [--threads N] [--pause-s S]

`speechd api` with a Wyoming door (`--wyoming-uri tcp://127.0.0.1:P`) on a fresh data folder,
and one supervised worker process on the real model beside it, which makes each cast as fast
as it can (no listener to keep ahead of, so a document's silence does not take its length in
wall time). Then:

1. **The largest pause document each door accepts**: ten-second breaks, then as much speech
   as the document's pause bound asks for (a minute free, a second per letter or digit, at
   most an hour: `speechd.text.check_input`), as long as the door's input may be (4,096
   characters for `/v1/audio/speech` and Wyoming, 200,000 for `/v1/casts`); `--pause-s`
   caps the pause (a quick run). Each is sent to its door and made to its end: the audio
   heard, the wall time, and the worker's RSS just before the request and its peak while the
   cast is made (sampled every 0.1 s). Before them, each document's speech alone (its breaks
   taken out) goes through the same door, with its row: the worker then holds what making
   that speech needs (its longest chunks' working set), so the pause documents' rows show
   what silence adds. Target: peak under 1.2x before (silence is written a chunk of at most
   ten seconds at a time, never made whole).
2. **The cost model before and after**: the rtf (the device's line slope, what a cast's
   chunks are planned for, kept in each cast's `start`) of an ordinary speech cast made just
   before the three pause documents and of one made just after them. Target: within 10%
   (silence is written at no device time and never learned as audio made). For scale, the
   same speech without breaks is made once more and a third cast's rtf printed: how far
   speech alone moves the estimate.

`pauses(args)` prints the section; it never asserts on speed or memory.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

__all__ = ["largest_pause_document", "pauses"]

TARGET_RSS = 1.2
TARGET_RTF = 0.10
BREAK = '<break time="10s"/>'
WORDS = "Breathe in slowly. "  # 15 letters in 19 characters: what buys the pause
SPEECH = (
    "The old lighthouse keeper climbed the narrow stairs every evening just before the sun "
    "slipped below the hills. He lit the great lamp, and wound the brass clockwork. "
)
_READ_S = 1800.0


def largest_pause_document(
    max_chars: int, max_pause_s: float | None = None, *, tag: str = "pauses"
) -> str:
    """The document of ten-second breaks, then the speech that pays for them, that asks for
    the most pause the check accepts within `max_chars` (and `max_pause_s`, if given); `tag`
    names a mark at its start, so that each door's document is a cast of its own (an
    identical request would join the cast another door made)."""
    from speechd.errors import InvalidRequest
    from speechd.text import MAX_PAUSE_S, allowed_pause_s, check_input

    most = MAX_PAUSE_S if max_pause_s is None else min(MAX_PAUSE_S, max_pause_s)
    letters = sum(map(str.isalnum, WORDS))
    for breaks in range(int(most // 10), 0, -1):
        copies = 1
        while allowed_pause_s(copies * letters) < breaks * 10:
            copies += 1
        words = WORDS * copies
        document = f'<speak><mark name="{tag}"/>{BREAK * breaks}{words.strip()}</speak>'
        if len(document) > max_chars:
            continue
        try:
            check_input(document, lang="a", ssml=True)
        except InvalidRequest:
            continue
        return document
    raise ValueError(f"no pause document fits in {max_chars} characters")


def _rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class _Peak:
    """The RSS of `pid`, sampled every 0.1 s on the loop while a request is made."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0.0

    async def sample(self) -> None:
        while True:
            self.peak = max(self.peak, _rss_mib(self.pid))
            await asyncio.sleep(0.1)


async def _speech(url: str, document: str) -> float:
    """The document through `/v1/audio/speech`: seconds of audio heard (pcm)."""
    body = {"input": document, "voice": "af_heart", "response_format": "pcm"}
    heard = 0
    async with (
        httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=_READ_S)) as client,
        client.stream("POST", url + "/v1/audio/speech", json=body) as response,
    ):
        if response.status_code != 200:
            await response.aread()
            raise RuntimeError(f"/v1/audio/speech answered {response.status_code}: {response.text}")
        async for piece in response.aiter_raw():
            heard += len(piece)
    return heard / 48_000


async def _wyoming(port: int, document: str) -> float:
    """The document through Wyoming's `synthesize` (`text_format: ssml`): seconds heard."""
    from wyoming.client import AsyncTcpClient
    from wyoming.tts import Synthesize, SynthesizeVoice

    heard = 0
    rate = width = channels = 0
    async with AsyncTcpClient("127.0.0.1", port) as client:
        voice = SynthesizeVoice(name="af_heart")
        await client.write_event(Synthesize(text=document, voice=voice, text_format="ssml").event())
        while True:
            event = await asyncio.wait_for(client.read_event(), _READ_S)
            if event is None:
                raise RuntimeError("Wyoming closed the connection")
            if event.type == "error":
                raise RuntimeError(f"Wyoming refused: {event.data}")
            if event.type == "audio-start":
                rate, width, channels = (event.data[k] for k in ("rate", "width", "channels"))
            if event.type == "audio-chunk":
                heard += len(event.payload or b"")
            if event.type == "audio-stop":
                return heard / (rate * width * channels)


async def _cast(url: str, document: str) -> tuple[str, float]:
    """The document through `/v1/casts`, made to its end: its id and seconds of audio."""
    async with httpx.AsyncClient(timeout=60) as client:
        made = await client.post(
            url + "/v1/casts",
            json={"input": document, "voice": "af_heart", "response_format": "pcm"},
        )
        if made.status_code not in (200, 201):
            raise RuntimeError(f"/v1/casts answered {made.status_code}: {made.text}")
        cast_id: str = made.json()["id"]
        while True:
            status = (await client.get(f"{url}/v1/casts/{cast_id}")).json()
            if status["status"] == "done":
                break
            if status["status"] == "failed":
                raise RuntimeError(f"the cast failed: {status.get('error')}")
            await asyncio.sleep(0.25)
        one = await client.get(f"{url}/v1/casts/{cast_id}/audio", headers={"range": "bytes=0-0"})
        size = int(one.headers["content-range"].rsplit("/", 1)[1])
    return cast_id, size / 48_000


async def _measured(pid: int, work: asyncio.Future) -> tuple[float, float, float, object]:
    """RSS before, peak meanwhile, wall seconds, and what `work` gave."""
    await asyncio.sleep(1.0)
    before = _rss_mib(pid)
    peak = _Peak(pid)
    sampler = asyncio.ensure_future(peak.sample())
    began = time.monotonic()
    try:
        result = await work
    finally:
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
    return before, max(peak.peak, before), time.monotonic() - began, result


async def _start_rtf(data: Path, cast_ids: list[str]) -> list[float | None]:
    """The rtf each cast's (first) `start` was planned at, read from the store."""
    from speechd.casts.schema import Start, cast_stream, decode, event_of
    from speechd.durable import open_store

    out: list[float | None] = []
    async with await open_store(str(data)) as store:
        for cast_id in cast_ids:
            batch = await store.read(cast_stream(cast_id), 0)
            start = next((r for r in batch.records if event_of(r) == "start"), None)
            out.append(None if start is None else decode(start.body, Start).rtf)
    return out


@contextlib.contextmanager
def _served(args: argparse.Namespace, folder: Path) -> Iterator[tuple[str, int, int]]:
    """`speechd api` with a Wyoming door, and a worker on the real model that makes casts as
    fast as it can: (api url, Wyoming port, the worker's pid)."""
    from harness.servers import free_port, start_server
    from speechd.engine import EngineConfig
    from speechd.worker import Supervisor, WorkerConfig

    data = folder / "data"
    port = free_port()
    flags = [
        "api", "--data-dir", str(data), "--log-level", "warning",
        "--wyoming-uri", f"tcp://127.0.0.1:{port}",
    ]  # fmt: skip
    engine = EngineConfig(
        model_dir=args.model_dir, device=args.device, threads=args.threads, engine="torch"
    )
    config = WorkerConfig(
        store=str(data), engine=engine, worker_id="bench-pauses", comfortable_lead_s=1e9
    )
    with start_server(flags, ready=False, timeout=120) as live:
        supervisor = Supervisor(config)
        supervisor.start()
        try:
            deadline = time.monotonic() + 600
            while httpx.get(live.url + "/readyz", timeout=5).status_code != 200:
                if time.monotonic() > deadline or not supervisor.alive:
                    raise RuntimeError("the worker never became ready")
                time.sleep(0.5)
            pid = supervisor.pid
            assert pid is not None
            yield live.url, port, pid
        finally:
            supervisor.stop()


def without_breaks(document: str) -> str:
    """`document`'s speech alone (its breaks taken out, its mark renamed): the same text made
    the same way, so that what its pauses add shows against it."""
    twin = document.replace(BREAK, "")
    return twin.replace('<mark name="', '<mark name="speech-', 1)


async def _row(
    label: str, chars: int, pause_s: int, pid: int, work: asyncio.Future
) -> tuple[float, float]:
    """Make `work` through a door, print its row; its RSS before and peak (0s: it failed)."""
    try:
        before, peak, wall, result = await _measured(pid, work)
    except RuntimeError as exc:
        print(f"   {label:<26} {chars:>7,} {pause_s:>7,} s  failed: {exc}")
        return 0.0, 0.0
    heard = result[1] if isinstance(result, tuple) else result
    assert isinstance(heard, float)
    print(
        f"   {label:<26} {chars:>7,} {pause_s:>7,} s {heard:>7.0f} s {wall:>6.0f} s"
        f" {before:>15.0f} MiB {peak:>4.0f} MiB {peak / before:>5.2f}x"
    )
    return before, peak


async def _run(url: str, port: int, pid: int, args: argparse.Namespace) -> list[str]:
    from speechd.limits import MAX_CAST_CHARS, MAX_INPUT_CHARS

    warm, _ = await _cast(url, SPEECH.replace("lamp", "lamp above"))  # the costs learn speech
    doors = (
        ("/v1/audio/speech", MAX_INPUT_CHARS, lambda doc: _speech(url, doc)),
        ("Wyoming", MAX_INPUT_CHARS, lambda doc: _wyoming(port, doc)),
        ("/v1/casts", MAX_CAST_CHARS, lambda doc: _cast(url, doc)),
    )
    documents = [
        largest_pause_document(chars, args.pause_s, tag=door.strip("/").replace("/", "-"))
        for door, chars, _ in doors
    ]
    print(
        f"   {'door':<26} {'chars':>7} {'pause':>8} {'heard':>8} {'wall':>7}"
        f" {'worker RSS before':>18} {'peak':>8} {'ratio':>6}"
    )
    # The same speech without its breaks first, through each door: the worker then holds what
    # making that speech needs (its largest chunks' working set), and the pause documents'
    # rows show what their silence adds to it.
    speech_peaks = []
    for (door, _, send), document in zip(doors, documents, strict=True):
        twin = without_breaks(document)
        work = asyncio.ensure_future(send(twin))
        speech_peaks.append((await _row(f"{door} (no breaks)", len(twin), 0, pid, work))[1])
    before_id, _ = await _cast(url, SPEECH)
    ratios, over_speech = [], []
    for (door, _, send), document, speech_peak in zip(doors, documents, speech_peaks, strict=True):
        pause_s = document.count(BREAK) * 10
        work = asyncio.ensure_future(send(document))
        before, peak = await _row(door, len(document), pause_s, pid, work)
        if before and speech_peak:
            ratios.append(peak / before)
            over_speech.append(peak / speech_peak)
    if ratios:
        print(
            f"   the pause documents' peak, worst: {max(ratios):.2f}x the worker's RSS before"
            f" each (target: under {TARGET_RSS}x); {max(over_speech):.2f}x the peak of the"
            " same speech without its breaks"
        )
    after_id, _ = await _cast(url, SPEECH.replace("lamp", "lamp again"))
    for (_, _, send), document in zip(doors, documents, strict=True):  # speech alone, again
        await send(without_breaks(document).replace("speech-", "again-", 1))
    control_id, _ = await _cast(url, SPEECH.replace("lamp", "lamp once more"))
    return [warm, before_id, after_id, control_id]


def pauses(args: argparse.Namespace) -> None:
    if not args.model_dir:
        print("\npauses: skipped (no --model-dir)")
        return
    print("\npauses: the largest pause document each door accepts, on the real model")
    with tempfile.TemporaryDirectory(prefix="bench-hostile-pauses-") as folder:
        with _served(args, Path(folder)) as (url, port, pid):
            ids = asyncio.run(_run(url, port, pid, args))
        _, before, after, control = asyncio.run(_start_rtf(Path(folder) / "data", ids))
    if before is None or after is None or control is None:
        print(f"   the cost model's rtf: not found ({before}, {after}, {control})")
        return
    change = after / before - 1 if before else float("inf")
    drift = control / after - 1 if after else float("inf")
    print(
        f"   the cost model's rtf (a speech cast's start) before the pause documents"
        f" {before:.4f}, after {after:.4f}: {change:+.1%} (target: within"
        f" {TARGET_RTF:.0%});\n   after the same speech again without breaks {control:.4f}:"
        f" {drift:+.1%} (what speech alone moves it by)"
    )
    print(f"   load average now {os.getloadavg()[0]:.1f}")
