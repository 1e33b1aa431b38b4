"""Books on the real Kokoro-82M weights (printed figures, not timed tests).

    python -m loadtest.bench_book --model-dir ~/.cache/speechd/kokoro-82m [--device cpu]
        [--threads N] [--chars 100000] [--chapters 10] [--requests 8] [--gap 20]
        [--requests-only] [--url http://127.0.0.1:8000]

One `speechd serve` (started here with `--comfortable-lead` a day, see `RACE_LEAD_S`, or
`--url`), four phases, each on its own text (a nonce
per run, so nothing is shared with an earlier one):

  cast      a plain cast of the book's text, made alone (`POST /v1/casts`): audio seconds per
            wall second, from its submit to its end
  book      the same text as a book of --chapters chapters (`POST /v1/books`), made alone:
            audio seconds per wall second, from the upload to the book being done
  requests  --requests ordinary requests (`/v1/audio/speech`, pcm, streamed), one every
            --gap seconds, alone: each one's first audio and a real-time listener's stalls
  beside    the same requests (texts of the same length) while another book is being made;
            the book is cancelled once they are done

`--requests-only` runs the last two phases alone (first audio beside a book, in minutes).

Printed: the book's speed against the cast's (target >= 0.95x), the requests' median and
worst first audio beside a book against alone (target <= 1.1x), and their stalls (target:
none more than alone); with the load average before and after. Figures are for a quiet
machine; nothing here fails on them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from ._listener import PCM_BYTES_PER_S, Listener
from ._servers import speechd_at

VOICE = "af_heart"
PROSE = (
    "The old lighthouse keeper climbed the narrow stairs every evening just before the sun "
    "slipped below the hills. He lit the great lamp, and wound the brass clockwork that "
    "turned it through the night. Ships passed far out at sea, and he counted their lights "
    "as other men count sheep, until the gulls woke him at dawn. "
)
REQUEST = (
    "Here is the weather for this afternoon: clouds clearing from the west, a light breeze, "
    "and a high of nineteen degrees. Take a coat for the evening."
)
_POLL_S = 1.0
RACE_LEAD_S = 86_400
"""The server's `--comfortable-lead`: a cast made alone is raced to its end, as a book is.
By default the worker sleeps once 30 s ahead of the listener a cast would have had from its
first audio, so the plain cast alone would take its own length in wall time and the two
speeds would not compare; listeners' requests (10 s of audio) are never that far ahead."""


def book_text(chars: int, chapters: int, nonce: str) -> tuple[str, str]:
    """A Markdown book of about `chars` characters in `chapters` chapters, and the same text
    as one plain cast would read it."""
    per = max(chars // chapters, 60)
    parts = []
    for n in range(1, chapters + 1):
        body = (PROSE * (per // len(PROSE) + 1))[:per]
        body = body[: body.rfind(".") + 1] or body
        parts.append((f"Chapter {n} of run {nonce}", body))
    markdown = "\n\n".join(f"# {title}\n\n{body}" for title, body in parts)
    plain = "\n\n".join(f"{title}\n\n{body}" for title, body in parts)
    return markdown, plain


async def until(client: httpx.AsyncClient, url: str, done: set[str], key: str) -> dict:
    while True:
        view = (await client.get(url)).json()
        if view[key] in done:
            return view
        if view[key] in ("failed", "cancelled"):
            raise SystemExit(f"{url}: {view[key]}")
        await asyncio.sleep(_POLL_S)


async def plain_cast(client: httpx.AsyncClient, url: str, text: str) -> tuple[float, float]:
    """(audio seconds, wall seconds) of one cast of `text`, made alone."""
    started = time.monotonic()
    made = await client.post(
        url + "/v1/casts", json={"input": text, "voice": VOICE, "response_format": "aac"}
    )
    made.raise_for_status()
    await until(client, f"{url}/v1/casts/{made.json()['id']}", {"done"}, "status")
    wall = time.monotonic() - started
    view = (await client.get(f"{url}/v1/casts/{made.json()['id']}")).json()
    return view["progress"]["audio_seconds"], wall


async def post_book(client: httpx.AsyncClient, url: str, markdown: str) -> str:
    made = await client.post(
        url + "/v1/books",
        content=markdown.encode(),
        params={"voice": VOICE, "format": "m4b"},
        headers={"content-type": "text/markdown"},
    )
    made.raise_for_status()
    return made.json()["id"]


async def book_alone(client: httpx.AsyncClient, url: str, markdown: str) -> tuple[float, float]:
    started = time.monotonic()
    book = await post_book(client, url, markdown)
    view = await until(client, f"{url}/v1/books/{book}", {"done"}, "state")
    wall = time.monotonic() - started
    return sum(c["audio_ms"] for c in view["chapters"]) / 1000, wall


async def one_request(client: httpx.AsyncClient, url: str, text: str) -> Listener:
    listener = Listener(time.monotonic())
    body = {"input": text, "voice": VOICE, "response_format": "pcm"}
    async with client.stream("POST", url + "/v1/audio/speech", json=body) as response:
        response.raise_for_status()
        async for data in response.aiter_bytes():
            if data:
                listener.receive(time.monotonic(), len(data) / PCM_BYTES_PER_S)
    listener.end(time.monotonic())
    return listener


async def requests(
    client: httpx.AsyncClient, url: str, count: int, gap: float, tag: str
) -> list[Listener]:
    heard = []
    for n in range(count):
        # Each text its own (no request joins another's cast), all of the same length.
        text = f"{REQUEST} Request {n:03d} {tag}."
        heard.append(await one_request(client, url, text))
        await asyncio.sleep(gap)
    return heard


def _firsts(heard: list[Listener]) -> list[float]:
    return [h.first - h.submitted for h in heard if h.first is not None]


async def run(url: str, args: argparse.Namespace) -> None:
    nonce = uuid.uuid4().hex[:8]
    async with httpx.AsyncClient(timeout=httpx.Timeout(60.0, read=3600.0)) as client:
        warm = {"voice": VOICE, "input": f"Warming up {nonce}.", "response_format": "pcm"}
        (await client.post(url + "/v1/audio/speech", json=warm)).raise_for_status()
        markdown, plain = book_text(args.chars, args.chapters, f"{nonce}a")
        print(f"   book: {len(plain):,} characters in {args.chapters} chapters")
        if not args.requests_only:
            cast_audio, cast_wall = await plain_cast(client, url, plain)
            print(f"   cast alone: {cast_audio:.1f} s of audio in {cast_wall:.1f} s")
            markdown, _ = book_text(args.chars, args.chapters, f"{nonce}b")
            book_audio, book_wall = await book_alone(client, url, markdown)
            print(f"   book alone: {book_audio:.1f} s of audio in {book_wall:.1f} s")
        alone = await requests(client, url, args.requests, args.gap, f"{nonce} alone")
        markdown, _ = book_text(args.chars, args.chapters, f"{nonce}c")
        book = await post_book(client, url, markdown)
        await asyncio.sleep(args.gap)  # the book under way
        beside = await requests(client, url, args.requests, args.gap, f"{nonce} beside")
        (await client.post(f"{url}/v1/books/{book}/cancel")).raise_for_status()
    if not args.requests_only:
        cast_speed, book_speed = cast_audio / cast_wall, book_audio / book_wall
        print(
            f"   audio s per wall s: cast {cast_speed:.3f}, book {book_speed:.3f}:"
            f" {book_speed / cast_speed:.3f}x (target >= 0.95x)"
        )
    a, b = _firsts(alone), _firsts(beside)
    if a and b:
        print(
            f"   first audio, median: alone {statistics.median(a):.3f} s, beside a book"
            f" {statistics.median(b):.3f} s: {statistics.median(b) / statistics.median(a):.3f}x"
            " (target <= 1.1x)"
        )
        print(f"   first audio, worst: alone {max(a):.3f} s, beside a book {max(b):.3f} s")
    print(
        f"   stalls: alone {sum(h.underruns for h in alone)} ({sum(h.stall_s for h in alone):.2f}"
        f" s), beside a book {sum(h.underruns for h in beside)}"
        f" ({sum(h.stall_s for h in beside):.2f} s)"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running speechd (default: start `speechd serve`)")
    parser.add_argument("--model-dir", default=os.environ.get("SPEECHD_TEST_MODEL_DIR"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--chars", type=int, default=100_000, help="the book's length")
    parser.add_argument("--chapters", type=int, default=10)
    parser.add_argument("--requests", type=int, default=8, help="ordinary requests per phase")
    parser.add_argument("--gap", type=float, default=20.0, help="seconds between requests")
    parser.add_argument(
        "--requests-only",
        action="store_true",
        help="the two request phases alone (no cast and book made alone: about 8 of 65 minutes)",
    )
    args = parser.parse_args(argv)
    print(f"speechd book benchmark, {os.cpu_count()} CPUs")
    print(f"   load average at the start {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="bench-book-") as work, speechd_at(
        args.url, model_dir=args.model_dir, device=args.device, threads=args.threads,
        workdir=Path(work), extra=["--comfortable-lead", str(RACE_LEAD_S)],
    ) as url:  # fmt: skip
        asyncio.run(run(url, args))
    print(f"   load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
