"""Books: what reading one costs, what refusing a hostile one costs, and what assembling an
audiobook from its chapters' audio costs. No model, no server.

    python -m loadtest.bench_books [--chars 1000000] [--minutes 10] [--repeat 3]

Prints three tables (CPU time, best of --repeat, one thread), with the load average before and
after (figures are for a quiet machine; they never fail anything here):

1. **Hostile books** (`loadtest._hostile_books`): the time `read_book` takes to refuse each,
   and the answer. Target: every refusal <= 100 ms.
2. **Reading** a valid book of --chars characters of prose (an EPUB of 40 chapters; the same
   text as Markdown and as plain text), against a baseline measured in the same run: the
   least any reader does with those bytes (inflate the EPUB's members and decode them; decode
   the text). Also the worst book within the default limits: an EPUB whose XML is all tags,
   just under `max_tags`: the most CPU a book that is not refused up front can take.
3. **Audiobooks**: --minutes of audio in 10 chapters, made once by speechd's encoders (aac
   and mp3, not timed), planned (`plan_audiobook`) and streamed (`plan.stream`), against the
   baseline of joining the same records; milliseconds per hour of audio.
"""

from __future__ import annotations

import argparse
import os
import time
import zlib
from collections.abc import Callable

import numpy as np

from speechd.audio import SAMPLE_RATE, AudiobookChapter, frame_table, new_encoder, plan_audiobook
from speechd.books import Book, BookLimits, read_book
from speechd.errors import BadBook

from ._hostile_books import epub, hostile, xhtml

PROSE = (
    "The old lighthouse keeper climbed the narrow stairs every evening just before the sun "
    "slipped below the hills. He lit the great lamp, and wound the brass clockwork that "
    "turned it through the night. "
)


def _best(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        started = time.process_time()
        try:
            result = fn()
        except BadBook as exc:
            result = exc
        best = min(best, time.process_time() - started)
    return best, result


def _answer(result: object) -> str:
    if isinstance(result, BadBook):
        limit = getattr(result, "limit", "")
        return f"{type(result).__name__}{f' ({limit})' if limit else ''}"
    if isinstance(result, Book):
        return f"read: {len(result.chapters)} chapters"
    return repr(result)[:60]


def _load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def hostile_table(repeat: int) -> None:
    print("\n## Hostile books: refused by read_book (target <= 100 ms each)\n")
    print("| case | bytes | ms | answer |")
    print("|---|---:|---:|---|")
    worst = 0.0
    for case in hostile():
        spent, result = _best(lambda c=case: read_book(c.data, c.kind), repeat)
        worst = max(worst, spent)
        print(f"| {case.name} | {len(case.data):,} | {spent * 1000:.1f} | {_answer(result)} |")
    print(f"\nworst: {worst * 1000:.1f} ms")


def _prose(chars: int) -> list[str]:
    """40 chapters of paragraphs, `chars` characters in all."""
    per = chars // 40
    paragraph = PROSE * 3
    return [
        "\n\n".join([f"Chapter {i + 1}"] + [paragraph] * max(per // len(paragraph), 1))
        for i in range(40)
    ]


def reading_table(chars: int, repeat: int) -> None:
    chapters = _prose(chars)
    documents = {
        f"ch{i}.xhtml": xhtml(f"{i}", "".join(f"<p>{p}</p>" for p in text.split("\n\n")))
        for i, text in enumerate(chapters)
    }
    data = epub(documents)
    markdown = "\n\n".join(f"# {t}" for t in chapters).encode()
    plain = "\n\n".join(chapters).encode()
    members = [zlib.compress(d.encode()) for d in documents.values()]
    limits = BookLimits()
    worst = epub({"tags.xhtml": xhtml("Tags", "<b/>" * (limits.max_tags - 200))})
    print(f"\n## Reading a book of {chars:,} characters (best of {repeat})\n")
    print("| kind | bytes | ms | baseline ms | ratio | answer |")
    print("|---|---:|---:|---:|---:|---|")
    rows = [
        ("epub", data, lambda: [zlib.decompress(m).decode() for m in members]),
        ("markdown", markdown, markdown.decode),
        ("text", plain, plain.decode),
        ("epub, all tags", worst, None),
    ]
    for kind, raw, baseline in rows:
        spent, result = _best(lambda k=kind, r=raw: read_book(r, k.split(",")[0]), repeat)
        base = _best(baseline, repeat)[0] if baseline else 0.0
        ratio = f"{spent / base:.1f}x" if base else "-"
        print(
            f"| {kind} | {len(raw):,} | {spent * 1000:.1f} | {base * 1000:.2f} | {ratio} | "
            f"{_answer(result)} |"
        )


def _chapter(fmt: str, seconds: float, freq: float) -> tuple[AudiobookChapter, list[bytes]]:
    n = int(seconds * SAMPLE_RATE)
    pcm = (0.3 * np.sin(2 * np.pi * freq * np.arange(n) / SAMPLE_RATE)).astype(np.float32)
    pcm[:1200] = 0
    encoder = new_encoder(fmt)
    step = 8 * SAMPLE_RATE
    records = [encoder.encode(pcm[i : i + step]) for i in range(0, n, step)]
    records.append(encoder.encode(np.zeros(0, np.float32), final=True))
    table = frame_table(fmt, b"".join(records))
    return AudiobookChapter(f"Chapter {freq:g}", n, table), records


def audiobook_table(minutes: float, repeat: int) -> None:
    print(f"\n## Audiobooks of {minutes:g} minutes in 10 chapters (best of {repeat})\n")
    print("| file | bytes | plan ms | stream ms | join ms (baseline) | stream/join | ms per hour |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for fmt, source in (("m4b", "aac"), ("mp3", "mp3")):
        made = [_chapter(source, minutes * 6, 200 + 50 * i) for i in range(10)]
        chapters = [c for c, _ in made]
        files = [r for _, r in made]
        plan_s, plan = _best(lambda c=chapters, f=fmt: plan_audiobook(f, c, title="T"), repeat)
        stream_s, size = _best(lambda p=plan, f=files: sum(map(len, p.stream(f))), repeat)
        join_s, _ = _best(lambda f=files: sum(len(b"".join(r)) for r in f), repeat)
        assert size == plan.size
        hours = minutes / 60
        print(
            f"| {fmt} | {plan.size:,} | {plan_s * 1000:.1f} | {stream_s * 1000:.1f} | "
            f"{join_s * 1000:.2f} | {stream_s / max(join_s, 1e-9):.0f}x | "
            f"{(plan_s + stream_s) * 1000 / hours:.0f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chars", type=int, default=1_000_000)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"load average before: {_load()}")
    hostile_table(args.repeat)
    reading_table(args.chars, args.repeat)
    audiobook_table(args.minutes, args.repeat)
    print(f"\nload average after: {_load()}")


if __name__ == "__main__":
    main()
