"""Books: what reading one costs, and what refusing a hostile one costs. No model, no server.

    python -m loadtest.bench_books [--chars 1000000] [--repeat 3]

Prints two tables (CPU time, best of --repeat, one thread), with the load average before and
after (figures are for a quiet machine; they never fail anything here):

1. **Hostile books** (`loadtest._hostile_books`): the time `read_book` takes to refuse each,
   and the answer. Target: every refusal <= 100 ms.
2. **Reading** a valid book of --chars characters of prose (an EPUB of 40 chapters; the same
   text as Markdown and as plain text), against a baseline measured in the same run: the
   least any reader does with those bytes (inflate the EPUB's members and decode them; decode
   the text). Also the worst book within the default limits: an EPUB whose XML is all tags,
   just under `max_tags`: the most CPU a book that is not refused up front can take.
"""

from __future__ import annotations

import argparse
import os
import time
import zlib
from collections.abc import Callable

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chars", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"load average before: {_load()}")
    hostile_table(args.repeat)
    reading_table(args.chars, args.repeat)
    print(f"\nload average after: {_load()}")


if __name__ == "__main__":
    main()
